import { type FormEvent, useState } from 'react';
import { countOf } from '../../plural';
import { ConfirmButton, Field, fmtDate, fmtInt } from '../../ui';
import {
  type AdminDeployment,
  fromUtcInput,
  Outcome,
  oneOf,
  STATUSES,
  TIERS,
  toUtcInput,
  useOperator,
  useOperatorAction,
  wholeOrNull,
} from './common';

/** The deployment's id as the admin routes' path parameter. */
const idOf = (d: AdminDeployment) => ({ path: { id: d.id } });

/** A deployment's terms and balance, and the operator's changes to them; each change reloads the organization. */
export function DeploymentPanel({ deployment: d, onChanged }: { deployment: AdminDeployment; onChanged: () => void }) {
  const b = d.balance;
  const headingId = `deployment-${d.id}`;
  return (
    <section aria-labelledby={headingId} className="operator-deployment" data-testid={`deployment-${d.id}`}>
      <h4 id={headingId}>
        {d.name} {d.is_primary ? <span className="badge">primary</span> : null}
      </h4>
      <p className="muted small">
        id <code>{d.id}</code> · secret <code>{d.secret_prefix}…</code>
      </p>
      <table aria-label={`Terms and balance of ${d.name}`}>
        <thead>
          <tr>
            <th scope="col">Tier</th>
            <th scope="col">Status</th>
            <th scope="col" className="num">
              Monthly used / allocation
            </th>
            <th scope="col" className="num">
              Purchased
            </th>
            <th scope="col" className="num">
              Reserved
            </th>
            <th scope="col" className="num">
              Available
            </th>
            <th scope="col">Period ends</th>
          </tr>
        </thead>
        <tbody>
          <tr>
            <td data-testid="deployment-tier">{d.tier}</td>
            <td data-testid="deployment-status">{d.status}</td>
            <td className="num">
              {fmtInt(b.monthly_used)} / {fmtInt(b.monthly_allocation)}
            </td>
            <td className="num" data-testid="deployment-purchased">
              {fmtInt(b.purchased)}
            </td>
            <td className="num">{fmtInt(b.reserved)}</td>
            <td className="num" data-testid="deployment-available">
              {fmtInt(b.available)}
            </td>
            <td>{fmtDate(b.period_end)}</td>
          </tr>
        </tbody>
      </table>
      <div className="operator-forms">
        <TierForm deployment={d} onChanged={onChanged} />
        <CreditsForm deployment={d} onChanged={onChanged} />
        <OverridesForm deployment={d} onChanged={onChanged} />
      </div>
    </section>
  );
}

function TierForm({ deployment: d, onChanged }: { deployment: AdminDeployment; onChanged: () => void }) {
  const call = useOperator();
  const [tier, setTier] = useState(d.tier);
  const [status, setStatus] = useState(d.status);
  const action = useOperatorAction();
  const changes = { ...(tier !== d.tier ? { tier: oneOf(TIERS, tier) } : {}), ...(status !== d.status ? { status: oneOf(STATUSES, status) } : {}) };
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await action.run(async () => {
      const answer = await call.PUT('/api/v1/admin/deployments/{id}', { params: idOf(d), body: changes });
      onChanged();
      return `${answer.name} is now ${answer.tier}, ${answer.status}.`;
    });
  };
  return (
    <form onSubmit={submit}>
      <h5>Tier and status</h5>
      <Field label="Tier">
        <select value={tier} onChange={(e) => setTier(e.target.value)}>
          {TIERS.map((t) => (
            <option key={t} value={t}>
              {t}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Status" hint="A suspended deployment is refused by every check">
        <select value={status} onChange={(e) => setStatus(e.target.value)}>
          <option value="active">active</option>
          <option value="suspended">suspended</option>
        </select>
      </Field>
      <button type="submit" disabled={action.busy || Object.keys(changes).length === 0}>
        Save tier and status
      </button>
      <Outcome action={action} />
    </form>
  );
}

function CreditsForm({ deployment: d, onChanged }: { deployment: AdminDeployment; onChanged: () => void }) {
  const call = useOperator();
  const [amount, setAmount] = useState('');
  const [reason, setReason] = useState('');
  const [expiresAt, setExpiresAt] = useState('');
  const action = useOperatorAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await action.run(async () => {
      const n = wholeOrNull(amount, 'Amount');
      if (n === null) throw new Error('Amount is required');
      const expires = fromUtcInput(expiresAt);
      const answer = await call.POST('/api/v1/admin/deployments/{id}/credits', {
        params: idOf(d),
        body: { amount: n, reason: reason.trim(), ...(expires ? { expires_at: expires } : {}) },
      });
      setAmount('');
      setReason('');
      setExpiresAt('');
      onChanged();
      const what = n > 0 ? `Granted ${countOf(n, 'credit')}` : `Took ${countOf(-n, 'credit')}`;
      return `${what}: purchased credits of ${answer.name} are now ${fmtInt(answer.balance.purchased)}.`;
    });
  };
  return (
    <form onSubmit={submit}>
      <h5>Grant or adjust credits</h5>
      <Field label="Amount" hint="Purchased credits: positive grants, negative takes away (never below zero)">
        <input type="number" step={1} required value={amount} onChange={(e) => setAmount(e.target.value)} />
      </Field>
      <Field label="Reason" hint="Kept in the ledger and the audit log">
        <input required maxLength={500} value={reason} onChange={(e) => setReason(e.target.value)} />
      </Field>
      <Field label="Grant expires at (UTC, optional)">
        <input type="datetime-local" step={1} value={expiresAt} onChange={(e) => setExpiresAt(e.target.value)} />
      </Field>
      <button type="submit" disabled={action.busy}>
        Apply credits
      </button>
      <Outcome action={action} />
    </form>
  );
}

interface OverrideFields {
  monthly_credits: string;
  api_rate_limit: string;
  ai_tokens_limit: string;
  expires_at: string;
}

const fieldsOf = (o: AdminDeployment['overrides']): OverrideFields => ({
  monthly_credits: o.monthly_credits === null ? '' : String(o.monthly_credits),
  api_rate_limit: o.api_rate_limit === null ? '' : String(o.api_rate_limit),
  ai_tokens_limit: o.ai_tokens_limit === null ? '' : String(o.ai_tokens_limit),
  expires_at: toUtcInput(o.expires_at),
});

function OverridesForm({ deployment: d, onChanged }: { deployment: AdminDeployment; onChanged: () => void }) {
  const call = useOperator();
  const [fields, setFields] = useState<OverrideFields>(() => fieldsOf(d.overrides));
  const action = useOperatorAction();
  const set = (name: keyof OverrideFields) => (e: { target: { value: string } }) => setFields((f) => ({ ...f, [name]: e.target.value }));
  const describe = (o: AdminDeployment['overrides']) => {
    const parts = [
      o.monthly_credits === null ? null : `${countOf(o.monthly_credits, 'credit')} a period`,
      o.api_rate_limit === null ? null : `${countOf(o.api_rate_limit, 'request')} a minute`,
      o.ai_tokens_limit === null ? null : countOf(o.ai_tokens_limit, 'AI token'),
    ].filter(Boolean);
    if (parts.length === 0) return 'no overrides: the tier applies';
    return `${parts.join(', ')}${o.expires_at ? ` until ${fmtDate(o.expires_at)}` : ''}`;
  };
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await action.run(async () => {
      const answer = await call.PUT('/api/v1/admin/deployments/{id}/overrides', {
        params: idOf(d),
        body: {
          monthly_credits: wholeOrNull(fields.monthly_credits, 'Monthly credits'),
          api_rate_limit: wholeOrNull(fields.api_rate_limit, 'API rate limit'),
          ai_tokens_limit: wholeOrNull(fields.ai_tokens_limit, 'AI tokens limit'),
          expires_at: fromUtcInput(fields.expires_at),
        },
      });
      setFields(fieldsOf(answer.overrides));
      onChanged();
      return `Overrides of ${answer.name}: ${describe(answer.overrides)}.`;
    });
  };
  const clear = () =>
    action.run(async () => {
      const answer = await call.DELETE('/api/v1/admin/deployments/{id}/overrides', { params: idOf(d) });
      setFields(fieldsOf(answer.overrides));
      onChanged();
      return `Overrides of ${answer.name} cleared: the tier applies.`;
    });
  return (
    <form onSubmit={submit}>
      <h5>Overrides</h5>
      <p className="muted small" data-testid="deployment-overrides">
        Now: {describe(d.overrides)}. An empty field removes that override.
      </p>
      <Field label="Monthly credits">
        <input type="number" min={0} step={1} value={fields.monthly_credits} onChange={set('monthly_credits')} />
      </Field>
      <Field label="API rate limit (requests a minute)">
        <input type="number" min={0} step={1} value={fields.api_rate_limit} onChange={set('api_rate_limit')} />
      </Field>
      <Field label="AI tokens limit (a period)">
        <input type="number" min={0} step={1} value={fields.ai_tokens_limit} onChange={set('ai_tokens_limit')} />
      </Field>
      <Field label="Overrides expire at (UTC, optional)">
        <input type="datetime-local" step={1} value={fields.expires_at} onChange={set('expires_at')} />
      </Field>
      <span className="row">
        <button type="submit" disabled={action.busy}>
          Set overrides
        </button>
        <ConfirmButton label="Clear overrides" confirmLabel="Clear every override" disabled={action.busy} onConfirm={async () => {
            await clear();
          }} />
      </span>
      <Outcome action={action} />
    </form>
  );
}
