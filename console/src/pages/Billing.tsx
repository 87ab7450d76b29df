import { useState } from 'react';
import { useSearch } from 'wouter';
import { api, idempotencyKey } from '../api';
import { useOrg } from '../org';
import { ErrorNote, Field, fmtDate, fmtInt, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import { LoadMore, usePages } from './paging';
import { webUrl } from '../links';
import type { Schemas } from '../types';

/** GET /billing/subscription (docs/billing.md): the subscription in force, else the latest ended one, else null. */
export type Subscription = Schemas['Subscription'];

export type Invoice = Schemas['Invoice'];

/** GET /billing/catalog: what this installation sells, each price with its amount when Stripe answered. */
export type Catalog = Schemas['BillingCatalog'];
type Plan = Catalog['subscription_prices'][number];

/** An amount in the smallest currency unit, as the currency writes it (4900 usd → $49.00). */
export function fmtMoney(amount: number | null, currency: string | null): string {
  if (amount === null || !currency) return '—';
  const format = new Intl.NumberFormat('en-US', { style: 'currency', currency: currency.toUpperCase() });
  const digits = format.resolvedOptions().maximumFractionDigits ?? 2;
  return format.format(amount / 10 ** digits);
}

/** A plan's price as it is billed, in two parts: "$49.00" and " / month" (" / 3 months"); '—' and '' when Stripe's amount is not known. */
export function recurringPrice(plan: Pick<Plan, 'unit_amount' | 'currency' | 'interval' | 'interval_count'>): { money: string; per: string } {
  const money = fmtMoney(plan.unit_amount, plan.currency);
  if (plan.unit_amount === null || !plan.interval) return { money, per: '' };
  const count = plan.interval_count ?? 1;
  return { money, per: count > 1 ? ` / ${count} ${plan.interval}s` : ` / ${plan.interval}` };
}

/** What one credit of a pack costs, to two more decimals than the currency has ($5.00 for 1,000 → $0.005); null when unknown. */
export function fmtPerCredit(amount: number | null, credits: number, currency: string | null): string | null {
  if (amount === null || !currency || credits <= 0) return null;
  const code = currency.toUpperCase();
  const digits = new Intl.NumberFormat('en-US', { style: 'currency', currency: code }).resolvedOptions().maximumFractionDigits ?? 2;
  const format = new Intl.NumberFormat('en-US', { style: 'currency', currency: code, minimumFractionDigits: digits, maximumFractionDigits: digits + 2 });
  return format.format(amount / credits / 10 ** digits);
}

const monthlyCredits = (credits: number | null) => (credits === null ? 'Unlimited credits a month' : `${fmtInt(credits)} credits a month`);

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
  const subscription = useLoad(() => api.GET('/billing/subscription', { params: { query: sel } }), [org.id]);
  const catalog = useLoad(() => api.GET('/billing/catalog', { params: { query: sel } }), [org.id]);
  const deployments = useLoad(() => api.list('/organizations/{id}/deployments', { params: { path: { id: org.id }, query: { limit: 100 } } }), [org.id]);
  const invoices = usePages(
    (cursor) => api.list('/billing/invoices', { params: { query: { ...sel, limit: 20, cursor: cursor ?? undefined } } }),
    [org.id],
  );
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
      const checkout = await api.POST('/billing/credit-packs/checkout', {
        params: { query: sel, header: { 'Idempotency-Key': idempotencyKey() } },
        body: { pack, ...(target ? { deployment_id: target } : {}), success_url: `${here}?checkout=paid`, cancel_url: `${here}?checkout=canceled` },
      });
      leaveFor(checkout.url);
    });
  const subscribe = (tier: string) =>
    leave.run(async () => {
      const answer = await api.POST('/billing/subscription', {
        params: { query: sel, header: { 'Idempotency-Key': idempotencyKey() } },
        body: { tier, success_url: `${here}?checkout=subscribed`, cancel_url: `${here}?checkout=canceled` },
      });
      // Without a subscription: a Checkout Session to go to; with one, the changed subscription.
      if (answer && 'url' in answer && typeof answer.url === 'string') leaveFor(answer.url);
    });
  const portal = () =>
    leave.run(async () => {
      const session = await api.POST('/billing/portal', { params: { query: sel }, body: { return_url: here } });
      leaveFor(session.url);
    });

  const inForce = sub ? IN_FORCE.includes(sub.status) : false;
  const canSubscribe = manage && configured && subscription.data !== undefined && !inForce;
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
      {catalog.data && configured && !catalog.data.prices_read ? (
        <p className="muted" role="status" data-testid="prices-unread">
          Some prices could not be read from Stripe just now (shown as —); Stripe Checkout shows the price before anything is paid.
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
        {catalog.data && catalog.data.subscription_prices.length > 0 ? (
          <ul className="cards plain" aria-label="Plans" data-testid="plans" style={{ gridTemplateColumns: 'repeat(auto-fill, minmax(min(15rem, 100%), 1fr))', marginBottom: '0.8rem' }}>
            {catalog.data.subscription_prices.map((p) => {
              const current = inForce && sub?.stripe_price_id === p.price_id;
              const { money, per } = recurringPrice(p);
              return (
                <li
                  key={p.price_id}
                  className="card"
                  aria-current={current ? 'true' : undefined}
                  data-testid={`plan-${p.price_id}`}
                  style={current ? { borderColor: 'var(--accent)', boxShadow: 'inset 0 0 0 1px var(--accent)' } : undefined}
                >
                  <h3 style={{ margin: 0, fontSize: '1rem' }}>
                    {p.tier} {current ? <span className="badge">Current plan</span> : null}
                  </h3>
                  <p className="value" data-testid="plan-price">
                    {money}
                    {per ? <span className="small muted" style={{ fontWeight: 400 }}>{per}</span> : null}
                  </p>
                  <p className="muted small" data-testid="plan-credits">
                    {monthlyCredits(p.monthly_credits)}
                  </p>
                  {canSubscribe ? (
                    <button type="button" onClick={() => void subscribe(p.tier)} disabled={leave.busy} style={{ marginTop: '0.6rem' }}>
                      Subscribe: {p.tier}
                    </button>
                  ) : null}
                </li>
              );
            })}
          </ul>
        ) : null}
        {inForce && manage ? <p className="muted small">Change the plan or the payment method in the billing portal.</p> : null}
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
                  <th scope="col" className="num">
                    Price
                  </th>
                  {manage ? <th scope="col">Buy</th> : null}
                </tr>
              </thead>
              <tbody>
                {catalog.data.packs.map((p) => {
                  const perCredit = fmtPerCredit(p.unit_amount, p.credits, p.currency);
                  return (
                    <tr key={p.pack}>
                      <td>{p.pack}</td>
                      <td className="num">{fmtInt(p.credits)}</td>
                      <td className="num">
                        {fmtMoney(p.unit_amount, p.currency)}
                        {perCredit ? (
                          <span className="muted small" style={{ display: 'block' }}>
                            {perCredit} a credit
                          </span>
                        ) : null}
                      </td>
                      {manage ? (
                        <td>
                          <button type="button" onClick={() => void buy(p.pack)} disabled={leave.busy || !configured}>
                            Buy {p.pack}
                          </button>
                        </td>
                      ) : null}
                    </tr>
                  );
                })}
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
