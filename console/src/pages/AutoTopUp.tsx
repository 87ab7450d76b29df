import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { api } from '../api';
import { ApiError } from '../api-errors';
import { webUrl } from '../links';
import { useOrg } from '../org';
import type { Schemas } from '../types';
import { CheckLabel, ErrorNote, fmtInt, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { type BodyOf, fieldErrorsOf, FormField, LocalTime } from './form-fields';
import { NoAccess } from './NotFound';

/** GET/PUT /organizations/{id}/auto-top-up (docs/billing.md, "Auto top-up"). */
export type AutoTopUpSetting = Schemas['AutoTopUp'];
type Input = BodyOf<'putAutoTopUp'>;
type Catalog = Schemas['BillingCatalog'];

/** What enabling needs (the 409's `details.missing`), in the API's words. */
export type Missing = 'payment_method' | 'billing_available' | 'stripe_webhook_secret';

/** The 409 CONFLICT of an enable that lacks something: the names of its `details.missing`. */
export function missingOf(error: unknown): Missing[] | null {
  if (!(error instanceof ApiError) || error.status !== 409) return null;
  const listed = error.details.missing;
  if (!Array.isArray(listed)) return null;
  const found = listed.filter((m): m is Missing => m === 'payment_method' || m === 'billing_available' || m === 'stripe_webhook_secret');
  return found.length > 0 ? found : null;
}

/**
 * An organization's auto top-up (docs/billing.md, "Auto top-up"): a credit pack bought off-session, with
 * the organization's saved card, when a deployment's available credits fall below a line, at most so
 * many times a month. Owners and admins read and change it (billing.manage), as the API decides.
 */
export function AutoTopUp() {
  const { org, can } = useOrg();
  const manage = can('billing.manage');
  const setting = useLoad(() => (manage ? api.GET('/organizations/{id}/auto-top-up', { params: { path: { id: org.id } } }) : Promise.resolve(null)), [org.id, manage]);
  const catalog = useLoad(() => (manage ? api.GET('/billing/catalog', { params: { query: { organization_id: org.id } } }) : Promise.resolve(null)), [org.id, manage]);
  const [notice, setNotice] = useState<string | null>(null);

  if (!manage) return <NoAccess what="auto top-up" />;

  const current = setting.data;
  return (
    <>
      <PageHeader title="Auto top-up" />
      <p className="muted">
        When a deployment's available credits fall below a line you choose, a credit pack is bought with the organization's saved card, without anyone
        at the keyboard, at most so many times a month. The credits arrive once Stripe confirms the payment. Three failed payments in a row turn it off.
      </p>
      <LoadError error={setting.error} retry={setting.reload} what="the auto top-up setting" busy={setting.loading} />
      <LoadError error={catalog.error} retry={catalog.reload} what="the credit packs" busy={catalog.loading} />
      {notice ? (
        <StatusNote tone="success" testId="auto-top-up-notice">
          {notice}
        </StatusNote>
      ) : null}
      {!current || !catalog.data ? (
        setting.error || catalog.error ? null : <Loading what="the auto top-up setting" />
      ) : (
        <>
          <Current setting={current} catalog={catalog.data} />
          <SettingForm
            key={current.updated_at ?? 'never'}
            orgId={org.id}
            setting={current}
            catalog={catalog.data}
            onSaved={(saved) => {
              setNotice(saved.enabled ? 'Auto top-up is on.' : 'Auto top-up is off.');
              setting.reload();
            }}
          />
        </>
      )}
    </>
  );
}

const packText = (catalog: Catalog, pack: string | null) => {
  if (!pack) return '—';
  const sold = catalog.packs.find((p) => p.pack === pack);
  return sold ? `${pack} (${fmtInt(sold.credits)} credits)` : `${pack} (no longer sold)`;
};

function Current({ setting, catalog }: { setting: AutoTopUpSetting; catalog: Catalog }) {
  return (
    <section aria-labelledby="auto-top-up-now" className="panel">
      <h2 id="auto-top-up-now">Now</h2>
      <dl className="facts" data-testid="auto-top-up">
        <dt>Auto top-up</dt>
        <dd>{setting.enabled ? 'On' : 'Off'}</dd>
        <dt>Below</dt>
        <dd>{setting.below_credits === null ? '—' : `${fmtInt(setting.below_credits)} available credits`}</dd>
        <dt>Pack</dt>
        <dd>{packText(catalog, setting.pack)}</dd>
        <dt>At most</dt>
        <dd>{setting.max_per_month === null ? '—' : `${fmtInt(setting.max_per_month)} a month`}</dd>
        <dt>Failed in a row</dt>
        <dd>{setting.consecutive_failures}</dd>
        <dt>Changed</dt>
        <dd>
          <LocalTime iso={setting.updated_at} />
        </dd>
      </dl>
      {setting.disabled_reason ? (
        <p className="error" role="status">
          Turned off after failed payments: {setting.disabled_reason}. Check the card in the billing portal, then turn it on again.
        </p>
      ) : null}
    </section>
  );
}

function SettingForm({ orgId, setting, catalog, onSaved }: { orgId: string; setting: AutoTopUpSetting; catalog: Catalog; onSaved: (saved: AutoTopUpSetting) => void }) {
  const [enabled, setEnabled] = useState(setting.enabled);
  const [below, setBelow] = useState(setting.below_credits === null ? '' : String(setting.below_credits));
  const [pack, setPack] = useState(setting.pack ?? catalog.packs[0]?.pack ?? '');
  const [perMonth, setPerMonth] = useState(setting.max_per_month === null ? '5' : String(setting.max_per_month));
  const action = useAction();
  const errors = fieldErrorsOf(action.error);
  const missing = missingOf(action.error);
  const noPacks = catalog.packs.length === 0;

  const send = (on: boolean) => {
    const body: Input = { enabled: on, below_credits: Number(below), pack, max_per_month: Number(perMonth) };
    void action.run(async () => onSaved(await api.PUT('/organizations/{id}/auto-top-up', { params: { path: { id: orgId } }, body })));
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    send(enabled);
  };

  return (
    <section aria-labelledby="auto-top-up-edit">
      <h2 id="auto-top-up-edit">Setting</h2>
      {noPacks ? (
        <p className="error" role="status" data-testid="no-packs">
          This installation sells no credit packs ({catalog.configured ? 'CREDIT_PACKS is empty' : 'Stripe is not configured'}), so auto top-up has nothing to buy.
          The operator can set it up (docs/billing.md).
        </p>
      ) : null}
      <form className="narrow" onSubmit={submit}>
        <CheckLabel checked={enabled} onChange={setEnabled}>
          Buy a credit pack automatically when a deployment runs low
        </CheckLabel>
        <FormField label="Below (available credits)" hint="A deployment whose available credits fall below this line buys one pack" error={errors.below_credits}>
          {(c) => <input {...c} type="number" min={1} step={1} inputMode="numeric" required value={below} onChange={(e) => setBelow(e.target.value)} />}
        </FormField>
        <FormField label="Pack" error={errors.pack}>
          {(c) => (
            <select {...c} required value={pack} onChange={(e) => setPack(e.target.value)} disabled={noPacks}>
              {catalog.packs.map((p) => (
                <option key={p.pack} value={p.pack}>
                  {p.pack} — {fmtInt(p.credits)} credits
                </option>
              ))}
              {setting.pack && !catalog.packs.some((p) => p.pack === setting.pack) ? <option value={setting.pack}>{setting.pack} (no longer sold)</option> : null}
            </select>
          )}
        </FormField>
        <FormField label="At most per month" hint="Top-ups started per calendar month (UTC) in the organization" error={errors.max_per_month}>
          {(c) => <input {...c} type="number" min={1} max={1000} step={1} inputMode="numeric" required value={perMonth} onChange={(e) => setPerMonth(e.target.value)} />}
        </FormField>
        {missing ? <MissingNote missing={missing} orgId={orgId} /> : <ErrorNote error={action.error} />}
        <span className="row">
          <button type="submit" disabled={action.busy || noPacks}>
            Save
          </button>
          {setting.enabled ? (
            <button type="button" className="secondary" disabled={action.busy || noPacks} onClick={() => send(false)}>
              Turn off
            </button>
          ) : null}
        </span>
      </form>
    </section>
  );
}

/** Why auto top-up could not be turned on, each missing thing in words with the way out. */
function MissingNote({ missing, orgId }: { missing: Missing[]; orgId: string }) {
  const portal = useAction();
  const openPortal = () =>
    portal.run(async () => {
      const back = `${window.location.origin}/console/orgs/${orgId}/auto-top-up`;
      const session = await api.POST('/billing/portal', { params: { query: { organization_id: orgId } }, body: { return_url: back } });
      const target = webUrl(session.url);
      if (!target) throw new Error('The billing service answered an address that is not http(s); not following it');
      window.location.assign(target);
    });
  return (
    <div className="error" role="alert" data-testid="auto-top-up-missing" data-code="CONFLICT">
      <p>
        <strong>Auto top-up cannot be turned on yet.</strong> Nothing was changed.
      </p>
      <ul className="missing">
        {missing.includes('payment_method') ? (
          <li data-missing="payment_method">
            <strong>No saved card.</strong> The organization has no payment method saved with Stripe, so there is nothing to charge. Add a card in the
            billing portal (on the <Link href="/billing">Billing page</Link>, or{' '}
            <button type="button" className="link" onClick={() => void openPortal()} disabled={portal.busy}>
              open the billing portal now
            </button>
            ), then save again.
          </li>
        ) : null}
        {missing.includes('billing_available') ? (
          <li data-missing="billing_available">
            <strong>Billing is not available</strong> for the organization's primary deployment: its plan must include billing, and the installation must
            sell credit packs through Stripe. See the <Link href="/billing">Billing page</Link>; the operator of this installation can change the plan.
          </li>
        ) : null}
        {missing.includes('stripe_webhook_secret') ? (
          <li data-missing="stripe_webhook_secret">
            <strong>This installation receives no Stripe events</strong> (<code>STRIPE_WEBHOOK_SECRET</code> is not set), and a top-up's credits arrive
            only with Stripe's event. The operator of this installation must set it.
          </li>
        ) : null}
      </ul>
      <ErrorNote error={portal.error} />
    </div>
  );
}
