import { useState } from 'react';
import { useSearch } from 'wouter';
import { get, idempotencyKey, list, post } from '../api';
import { useOrg } from '../org';
import { ErrorNote, Field, fmtDate, fmtInt, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import type { Deployment } from './Overview';
import { LoadMore, usePages } from './paging';
import { webUrl } from '../links';
import type { Schemas } from '../types';

/** GET /billing/subscription (docs/billing.md): the subscription in force, else the latest ended one, else null. */
export type Subscription = Schemas['Subscription'];

export type Invoice = Schemas['Invoice'];

/** GET /billing/catalog: what this installation sells. */
export type Catalog = Schemas['BillingCatalog'];

/** An amount in the smallest currency unit, as the currency writes it (4900 usd → $49.00). */
export function fmtMoney(amount: number | null, currency: string | null): string {
  if (amount === null || !currency) return '—';
  const format = new Intl.NumberFormat('en-US', { style: 'currency', currency: currency.toUpperCase() });
  const digits = format.resolvedOptions().maximumFractionDigits ?? 2;
  return format.format(amount / 10 ** digits);
}

/** Leave the console for Stripe (Checkout or the portal); the browser comes back to the return URL. */
function leaveFor(url: string): void {
  const target = webUrl(url);
  if (!target) throw new Error('The billing service answered an address that is not http(s); not following it');
  window.location.assign(target);
}

const IN_FORCE = ['active', 'past_due', 'unpaid'];

export function Billing() {
  const { org, can } = useOrg();
  const sel = { organization_id: org.id };
  const here = `${window.location.origin}/console/orgs/${org.id}/billing`;
  const search = new URLSearchParams(useSearch());
  const subscription = useLoad(() => get<Subscription | null>('/billing/subscription', sel), [org.id]);
  const catalog = useLoad(() => get<Catalog>('/billing/catalog', sel), [org.id]);
  const deployments = useLoad(() => list<Deployment>(`/organizations/${org.id}/deployments`, { limit: 100 }), [org.id]);
  const invoices = usePages((cursor) => list<Invoice>('/billing/invoices', { ...sel, limit: 20, cursor }), [org.id]);
  const [deploymentId, setDeploymentId] = useState('');
  const leave = useAction();
  const manage = can('billing.manage');

  if (!can('billing.read')) return <NoAccess what="billing" />;

  const configured = catalog.data?.configured ?? false;
  const sub = subscription.data;
  const tierOf = (priceId: string | null) => catalog.data?.subscription_prices.find((p) => p.price_id === priceId)?.tier ?? null;
  const primary = deployments.data?.data.find((d) => d.is_primary);
  const target = deploymentId || primary?.id || '';

  // One Idempotency-Key per click: a retried request (network) gets the same Checkout Session back.
  const buy = (pack: string) =>
    leave.run(async () => {
      const checkout = await post<{ url: string }>(
        `/billing/credit-packs/checkout?organization_id=${encodeURIComponent(org.id)}`,
        { pack, ...(target ? { deployment_id: target } : {}), success_url: `${here}?checkout=paid`, cancel_url: `${here}?checkout=canceled` },
        { 'idempotency-key': idempotencyKey() },
      );
      leaveFor(checkout.url);
    });
  const subscribe = (tier: string) =>
    leave.run(async () => {
      const answer = await post<{ url?: string }>(
        `/billing/subscription?organization_id=${encodeURIComponent(org.id)}`,
        { tier, success_url: `${here}?checkout=subscribed`, cancel_url: `${here}?checkout=canceled` },
        { 'idempotency-key': idempotencyKey() },
      );
      if (answer?.url) leaveFor(answer.url);
    });
  const portal = () =>
    leave.run(async () => {
      const session = await post<{ url: string }>(`/billing/portal?organization_id=${encodeURIComponent(org.id)}`, { return_url: here });
      leaveFor(session.url);
    });

  const back = search.get('checkout');
  return (
    <>
      <PageHeader title="Billing">
        {manage ? (
          <button type="button" onClick={() => void portal()} disabled={leave.busy || !configured}>
            Open billing portal
          </button>
        ) : null}
      </PageHeader>
      {back === 'paid' || back === 'subscribed' ? (
        <StatusNote tone="success">
          Payment sent to Stripe. {back === 'paid' ? 'The credits' : 'The subscription'} appear here once Stripe confirms it, usually within seconds; reload to
          see them.
        </StatusNote>
      ) : back === 'canceled' ? (
        <StatusNote tone="neutral">Checkout was canceled: nothing was charged.</StatusNote>
      ) : null}
      <ErrorNote error={leave.error} />
      <LoadError error={catalog.error} retry={catalog.reload} what="what this installation sells" busy={catalog.loading} />
      <LoadError error={deployments.error} retry={deployments.reload} what="deployments" busy={deployments.loading} />
      {catalog.data && !configured ? (
        <p className="error" role="status" data-testid="billing-not-configured">
          Stripe is not configured on this installation (STRIPE_SECRET_KEY): subscriptions, credit packs and the billing portal are unavailable. The operator
          can set it up (docs/billing.md).
        </p>
      ) : null}
      {!manage ? <p className="muted">Your role can see billing; owners and admins buy and manage it.</p> : null}

      <section aria-labelledby="subscription">
        <h2 id="subscription">Subscription</h2>
        <LoadError error={subscription.error} retry={subscription.reload} what="the subscription" busy={subscription.loading} />
        {subscription.data === undefined ? (
          subscription.error ? null : <Loading what="the subscription" />
        ) : (
          <dl className="facts" data-testid="subscription">
            <dt>Plan</dt>
            <dd>{org.tier}</dd>
            <dt>Status</dt>
            <dd>{sub ? sub.status : 'No subscription'}</dd>
            {sub ? (
              <>
                <dt>Price</dt>
                <dd>
                  {tierOf(sub.stripe_price_id) ?? '—'} <span className="muted small">({sub.stripe_price_id ?? 'no price'})</span>
                </dd>
                <dt>Current period ends</dt>
                <dd>
                  {fmtDate(sub.current_period_end)}
                  {sub.cancel_at_period_end ? ' — the subscription ends then' : ''}
                </dd>
              </>
            ) : null}
          </dl>
        )}
        {manage && configured && subscription.data !== undefined && !(sub && IN_FORCE.includes(sub.status)) ? (
          <p className="row">
            {(catalog.data?.subscription_prices ?? []).map((p) => (
              <button key={p.price_id} type="button" onClick={() => void subscribe(p.tier)} disabled={leave.busy}>
                Subscribe: {p.tier}
              </button>
            ))}
          </p>
        ) : null}
        {sub && IN_FORCE.includes(sub.status) && manage ? <p className="muted small">Change the plan or the payment method in the billing portal.</p> : null}
      </section>

      <section aria-labelledby="packs">
        <h2 id="packs">Credit packs</h2>
        <p className="muted">Purchased credits never reset; they are spent after the monthly allocation.</p>
        {catalog.data && catalog.data.packs.length === 0 ? (
          <p className="muted">No credit packs are on sale (CREDIT_PACKS).</p>
        ) : catalog.data ? (
          <>
            {manage && (deployments.data?.data.length ?? 0) > 1 ? (
              <Field label="Credits go to">
                <select value={target} onChange={(e) => setDeploymentId(e.target.value)}>
                  {(deployments.data?.data ?? []).map((d) => (
                    <option key={d.id} value={d.id}>
                      {d.name}
                      {d.is_primary ? ' (primary)' : ''}
                    </option>
                  ))}
                </select>
              </Field>
            ) : null}
            <table data-testid="packs">
              <thead>
                <tr>
                  <th scope="col">Pack</th>
                  <th scope="col" className="num">
                    Credits
                  </th>
                  {manage ? <th scope="col">Buy</th> : null}
                </tr>
              </thead>
              <tbody>
                {catalog.data.packs.map((p) => (
                  <tr key={p.pack}>
                    <td>{p.pack}</td>
                    <td className="num">{fmtInt(p.credits)}</td>
                    {manage ? (
                      <td>
                        <button type="button" onClick={() => void buy(p.pack)} disabled={leave.busy || !configured}>
                          Buy {p.pack}
                        </button>
                      </td>
                    ) : null}
                  </tr>
                ))}
              </tbody>
            </table>
          </>
        ) : catalog.error ? null : (
          <Loading what="credit packs" shape="table" rows={2} />
        )}
      </section>

      <section aria-labelledby="invoices">
        <h2 id="invoices">Invoices</h2>
        <LoadError error={invoices.error} retry={invoices.retry} what="invoices" busy={invoices.loading || invoices.loadingMore} />
        {invoices.loading && invoices.items.length === 0 ? (
          <Loading what="invoices" shape="table" />
        ) : invoices.error && invoices.items.length === 0 ? null : invoices.items.length === 0 ? (
          <p className="muted">No invoices yet.</p>
        ) : (
          <>
            <table data-testid="invoices">
              <thead>
                <tr>
                  <th scope="col">Date</th>
                  <th scope="col">Period</th>
                  <th scope="col" className="num">
                    Amount
                  </th>
                  <th scope="col" className="num">
                    Paid
                  </th>
                  <th scope="col">Status</th>
                  <th scope="col">Invoice</th>
                </tr>
              </thead>
              <tbody>
                {invoices.items.map((i) => (
                  <tr key={i.id}>
                    <td>{fmtDate(i.created_at)}</td>
                    <td>{i.period_start && i.period_end ? `${i.period_start.slice(0, 10)} – ${i.period_end.slice(0, 10)}` : '—'}</td>
                    <td className="num">{fmtMoney(i.amount_due, i.currency)}</td>
                    <td className="num">{fmtMoney(i.amount_paid, i.currency)}</td>
                    <td>{i.status ?? '—'}</td>
                    <td>
                      {webUrl(i.hosted_invoice_url) ? (
                        <a href={webUrl(i.hosted_invoice_url) ?? undefined} target="_blank" rel="noopener noreferrer">
                          View invoice <span className="visually-hidden">{i.stripe_invoice_id} (opens in a new tab)</span>
                        </a>
                      ) : (
                        <span className="muted">{i.stripe_invoice_id}</span>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            <LoadMore pages={invoices} one="invoice" />
          </>
        )}
      </section>
    </>
  );
}
