import { type FormEvent, useId, useState } from 'react';
import { api } from '../api';
import { useOrg } from '../org';
import { countOf } from '../plural';
import type { Schemas } from '../types';
import { CheckLabel, ConfirmButton, ErrorNote, fmtInt, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { type BodyOf, FieldMessage, fieldErrorsOf, FormField, LocalTime, wholeOrNull } from './form-fields';
import { NoAccess } from './NotFound';

/** A budget as /organizations/{id}/budgets answers it, with its window in progress (docs/budgets.md, API). */
export type Budget = Schemas['Budget'];
type CreateBody = BodyOf<'createBudget'>;
type UpdateBody = BodyOf<'updateBudget'>;
type Scope = Budget['scope'];
type WindowKind = Budget['window'];
type Mode = Budget['mode'];
type Deployment = Schemas['Deployment'];
type ApiKey = Schemas['ApiKey'];

/** The budget's "each one" value of end_user_id and tool_name: one counter per end user or tool. */
const EACH = '*';

const SCOPES: Array<{ value: Scope; label: string }> = [
  { value: 'organization', label: 'The whole organization' },
  { value: 'deployment', label: 'One deployment' },
  { value: 'api_key', label: 'One API key' },
  { value: 'end_user', label: 'End users' },
  { value: 'tool', label: 'Tools' },
];

const WINDOWS: Array<{ value: WindowKind; label: string }> = [
  { value: 'hour', label: 'Hour (UTC)' },
  { value: 'day', label: 'Day (UTC)' },
  { value: 'week', label: 'Week, from Monday (UTC)' },
  { value: 'month', label: 'Calendar month (UTC)' },
  { value: 'period', label: "The deployment's credit period" },
];

const windowLabel = (w: WindowKind) => WINDOWS.find((x) => x.value === w)?.label ?? w;

/** Names for the ids a budget holds: its deployment, its API key. */
interface Names {
  deployment(id: string): string;
  apiKey(id: string): string;
}

/** What the budget caps, in words. */
export function scopeText(b: Pick<Budget, 'scope' | 'deployment_id' | 'api_key_id' | 'end_user_id' | 'tool_name'>, names: Names): string {
  switch (b.scope) {
    case 'organization':
      return 'The whole organization';
    case 'deployment':
      return `Deployment ${b.deployment_id ? names.deployment(b.deployment_id) : '—'}`;
    case 'api_key':
      return `API key ${b.api_key_id ? names.apiKey(b.api_key_id) : '—'}`;
    case 'end_user':
      return b.end_user_id === EACH ? 'Each end user' : `End user ${b.end_user_id ?? '—'}`;
    case 'tool':
      return b.tool_name === EACH ? 'Each tool' : `Tool ${b.tool_name ?? '—'}`;
  }
}

/**
 * An organization's budgets (docs/budgets.md): each with what its window in progress has spent of its
 * limits. Every role reads them (usage.read); owners and admins create, change and delete them
 * (billing.manage), as the API decides.
 */
export function Budgets() {
  const { org, can } = useOrg();
  const budgets = useLoad(() => api.GET('/organizations/{id}/budgets', { params: { path: { id: org.id } } }), [org.id]);
  const deployments = useLoad(() => api.list('/organizations/{id}/deployments', { params: { path: { id: org.id }, query: { limit: 100 } } }), [org.id]);
  const readKeys = can('api_keys.read');
  const keys = useLoad(() => (readKeys ? api.list('/organizations/{id}/api-keys', { params: { path: { id: org.id }, query: { limit: 100 } } }) : Promise.resolve(null)), [org.id, readKeys]);
  const [creating, setCreating] = useState(false);
  const [editing, setEditing] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const action = useAction();
  const manage = can('billing.manage');

  if (!can('usage.read')) return <NoAccess what="budgets" />;

  const deploymentList = deployments.data?.data ?? [];
  const keyList = (keys.data?.data ?? []).filter((k) => k.revoked_at === null);
  const names: Names = {
    deployment: (id) => deploymentList.find((d) => d.id === id)?.name ?? id,
    apiKey: (id) => {
      const key = keys.data?.data.find((k) => k.id === id);
      return key ? `${key.name} (${key.key_prefix}…)` : id;
    },
  };
  const remove = (b: Budget) =>
    action.run(async () => {
      setNotice(null);
      await api.DELETE('/organizations/{id}/budgets/{budgetId}', { params: { path: { id: org.id, budgetId: b.id } } });
      if (editing === b.id) setEditing(null);
      budgets.reload();
      setNotice(`The budget for ${scopeText(b, names).toLowerCase()} is deleted.`);
    });
  const edited = budgets.data?.find((b) => b.id === editing);

  return (
    <>
      <PageHeader title="Budgets">
        <button type="button" className="secondary" onClick={budgets.reload} disabled={budgets.loading}>
          Refresh
        </button>
        {manage && !creating ? (
          <button
            type="button"
            onClick={() => {
              setCreating(true);
              setEditing(null);
              setNotice(null);
            }}
          >
            New budget
          </button>
        ) : null}
      </PageHeader>
      <p className="muted">
        A budget caps what the organization, a deployment, an API key, end users or tools may spend in a window of time. A <strong>block</strong> budget
        refuses a charge that would cross its credit limit; an <strong>alert</strong> budget only counts and sends its alerts (the{' '}
        <code>budget.threshold</code> and <code>budget.exceeded</code> webhook events).
      </p>
      {!manage ? <p className="muted">Your role can see budgets; owners and admins create and change them.</p> : null}

      {creating && manage ? (
        <NewBudget
          orgId={org.id}
          deployments={deploymentList}
          keys={keyList}
          onDone={(created) => {
            setCreating(false);
            if (created) {
              budgets.reload();
              setNotice(`Budget created for ${scopeText(created, names).toLowerCase()}.`);
            }
          }}
        />
      ) : null}

      {edited && manage ? (
        <EditBudget
          key={edited.id}
          budget={edited}
          title={scopeText(edited, names)}
          save={(body) => api.PUT('/organizations/{id}/budgets/{budgetId}', { params: { path: { id: org.id, budgetId: edited.id } }, body })}
          onDone={(saved) => {
            setEditing(null);
            if (saved) {
              budgets.reload();
              setNotice(`The budget for ${scopeText(saved, names).toLowerCase()} is saved.`);
            }
          }}
        />
      ) : null}

      <section aria-labelledby="budget-list">
        <h2 id="budget-list">Budgets and their windows in progress</h2>
        <LoadError error={budgets.error} retry={budgets.reload} what="budgets" busy={budgets.loading} />
        <LoadError error={deployments.error} retry={deployments.reload} what="deployments" busy={deployments.loading} />
        <ErrorNote error={action.error} />
        {notice ? (
          <StatusNote tone="success" testId="budget-notice">
            {notice}
          </StatusNote>
        ) : null}
        {!budgets.data ? (
          budgets.error ? null : <Loading what="budgets" shape="table" rows={2} />
        ) : budgets.data.length === 0 ? (
          <p className="muted">No budgets yet.</p>
        ) : (
          <div className="table-scroll">
            <table data-testid="budgets">
              <thead>
                <tr>
                  <th scope="col">Caps</th>
                  <th scope="col">Window</th>
                  <th scope="col">Mode</th>
                  <th scope="col">Spent in this window</th>
                  <th scope="col">Alerts at</th>
                  {manage ? <th scope="col">Actions</th> : null}
                </tr>
              </thead>
              <tbody>
                {budgets.data.map((b) => (
                  <tr key={b.id} data-budget={b.id}>
                    <th scope="row">
                      {scopeText(b, names)}
                      {b.scope !== 'deployment' && b.deployment_id ? <span className="muted small window-times">only deployment {names.deployment(b.deployment_id)}</span> : null}
                    </th>
                    <td>
                      {windowLabel(b.window)}
                      <span className="muted small window-times" data-testid="window-start">
                        since <LocalTime iso={b.window_start} />
                      </span>
                      <span className="muted small window-times" data-testid="resets-at">
                        resets <LocalTime iso={b.resets_at} />
                      </span>
                    </td>
                    <td>{b.mode === 'block' ? 'Block' : 'Alert only'}</td>
                    <td>
                      {b.limit_credits !== null ? (
                        <SpentBar what="credits" spent={b.spent_credits ?? 0} limit={b.limit_credits} remaining={b.remaining_credits ?? 0} thresholds={b.alert_thresholds} />
                      ) : null}
                      {b.limit_ai_tokens !== null ? (
                        <SpentBar what="AI tokens" spent={b.spent_ai_tokens ?? 0} limit={b.limit_ai_tokens} remaining={b.remaining_ai_tokens ?? 0} thresholds={b.alert_thresholds} />
                      ) : null}
                      {b.subjects ? <Subjects budget={b} /> : null}
                    </td>
                    <td>{b.alert_thresholds.length > 0 ? b.alert_thresholds.map((t) => `${t}\u00a0%`).join(', ') : 'none'}</td>
                    {manage ? (
                      <td>
                        <span className="row">
                          <button
                            type="button"
                            className="secondary"
                            onClick={() => {
                              setEditing(b.id);
                              setCreating(false);
                              setNotice(null);
                            }}
                          >
                            Edit
                          </button>
                          <ConfirmButton label="Delete" confirmLabel="Delete budget" onConfirm={() => remove(b).then(() => undefined)} />
                        </span>
                      </td>
                    ) : null}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}

/**
 * What a window has spent of one limit: a bar (a meter for assistive technology) and the numbers. The
 * bar turns at the first alert threshold reached and when the limit is reached; the words say so too.
 */
function SpentBar({ what, spent, limit, remaining, thresholds }: { what: string; spent: number; limit: number; remaining: number; thresholds: number[] }) {
  const percent = limit > 0 ? (spent / limit) * 100 : 0;
  const reached = thresholds.filter((t) => percent >= t);
  const state = spent >= limit ? 'full' : reached.length > 0 ? 'alert' : 'ok';
  const text = `${fmtInt(spent)} of ${fmtInt(limit)} ${what}`;
  return (
    <div className="spent" data-testid={`spent-${what === 'credits' ? 'credits' : 'ai-tokens'}`}>
      {/* biome-ignore lint/a11y/useSemanticElements: a native <meter> draws itself differently in each browser and ignores the theme's colours */}
      <div
        className="spent-bar"
        role="meter"
        aria-label={`${what} spent`}
        aria-valuemin={0}
        aria-valuemax={limit}
        aria-valuenow={Math.min(spent, limit)}
        aria-valuetext={text}
        data-state={state}
      >
        <span className="spent-fill" style={{ width: `${Math.min(100, percent)}%` }} />
      </div>
      <span className="small">
        {text} · <span data-testid="remaining">{fmtInt(remaining)} left</span>
        {state === 'full' ? <span className="spent-full"> · limit reached</span> : null}
      </span>
    </div>
  );
}

/** A "*" budget's end users or tools that spent in the window, most first (at most 100). */
function Subjects({ budget }: { budget: Budget }) {
  const subjects = budget.subjects ?? [];
  const who = budget.scope === 'tool' ? 'tool' : 'end user';
  if (subjects.length === 0) return <p className="muted small">No {who} has spent in this window yet.</p>;
  return (
    <details>
      <summary>
        {countOf(subjects.length, who)} in this window (the bar shows the largest)
      </summary>
      <table>
        <thead>
          <tr>
            <th scope="col">{who === 'tool' ? 'Tool' : 'End user'}</th>
            {budget.limit_credits !== null ? <th scope="col" className="num">Credits</th> : null}
            {budget.limit_ai_tokens !== null ? <th scope="col" className="num">AI tokens</th> : null}
          </tr>
        </thead>
        <tbody>
          {subjects.map((s, i) => (
            // A viewer sees every end user as "***": the position keeps the rows apart.
            // biome-ignore lint/suspicious/noArrayIndexKey: the list is answered whole and never reordered here
            <tr key={`${i}-${s.id}`}>
              <td>{s.id}</td>
              {budget.limit_credits !== null ? <td className="num">{fmtInt(s.spent_credits)}</td> : null}
              {budget.limit_ai_tokens !== null ? <td className="num">{fmtInt(s.spent_ai_tokens)}</td> : null}
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  );
}

/** "80, 100" → [80, 100]; each item as typed, so the API names a threshold that is not a whole percent. */
function thresholdsOf(text: string): number[] {
  return text
    .split(/[\s,;]+/)
    .filter((t) => t !== '')
    .map((t) => Number(t.replace(/%$/, '')));
}

/** The limits, window, mode and thresholds: the fields a budget's create and change share. */
interface Limits {
  credits: string;
  aiTokens: string;
  window: WindowKind;
  mode: Mode;
  thresholds: string;
}

function LimitFields({ value, onChange, errors }: { value: Limits; onChange: (next: Limits) => void; errors: Record<string, string> }) {
  const modeError = errors.mode;
  const radio = useId();
  const modeErrorId = `${radio}-error`;
  return (
    <>
      <div className="form-grid">
        <FormField label="Credit limit" hint="Whole credits per window; a budget needs this limit, the AI token limit, or both" error={errors.limit_credits}>
          {(c) => <input {...c} type="number" min={1} step={1} inputMode="numeric" value={value.credits} onChange={(e) => onChange({ ...value, credits: e.target.value })} />}
        </FormField>
        <FormField label="AI token limit" hint="Input and output tokens of AI calls per window" error={errors.limit_ai_tokens}>
          {(c) => <input {...c} type="number" min={1} step={1} inputMode="numeric" value={value.aiTokens} onChange={(e) => onChange({ ...value, aiTokens: e.target.value })} />}
        </FormField>
        <FormField label="Window" error={errors.window}>
          {(c) => (
            <select {...c} value={value.window} onChange={(e) => onChange({ ...value, window: e.target.value as WindowKind })}>
              {WINDOWS.map((w) => (
                <option key={w.value} value={w.value}>
                  {w.label}
                </option>
              ))}
            </select>
          )}
        </FormField>
        <FormField label="Alert thresholds" hint="Percents of the limit, 1 to 100, separated by commas" error={errors.alert_thresholds}>
          {(c) => <input {...c} type="text" inputMode="numeric" value={value.thresholds} onChange={(e) => onChange({ ...value, thresholds: e.target.value })} placeholder="80, 100" />}
        </FormField>
      </div>
      <fieldset className="choices" aria-describedby={modeError ? modeErrorId : undefined}>
        <legend>Mode</legend>
        <label className="check">
          <input type="radio" name={radio} checked={value.mode === 'block'} onChange={() => onChange({ ...value, mode: 'block' })} />
          <span>
            Block <span className="muted">— refuse a charge that would cross the credit limit</span>
          </span>
        </label>
        <label className="check">
          <input type="radio" name={radio} checked={value.mode === 'alert'} onChange={() => onChange({ ...value, mode: 'alert' })} />
          <span>
            Alert only <span className="muted">— count and alert, never refuse</span>
          </span>
        </label>
        {modeError ? <FieldMessage id={modeErrorId}>{modeError}</FieldMessage> : null}
      </fieldset>
    </>
  );
}

function NewBudget({ orgId, deployments, keys, onDone }: { orgId: string; deployments: Deployment[]; keys: ApiKey[]; onDone: (created: Budget | null) => void }) {
  const [scope, setScope] = useState<Scope>('organization');
  const [deploymentId, setDeploymentId] = useState('');
  const [apiKeyId, setApiKeyId] = useState('');
  const [each, setEach] = useState(true);
  const [subject, setSubject] = useState('');
  const [limits, setLimits] = useState<Limits>({ credits: '', aiTokens: '', window: 'day', mode: 'block', thresholds: '80, 100' });
  const action = useAction();
  const errors = fieldErrorsOf(action.error);

  const submit = (e: FormEvent) => {
    e.preventDefault();
    const body: CreateBody = { scope, window: limits.window, mode: limits.mode, alert_thresholds: thresholdsOf(limits.thresholds) };
    if (deploymentId) body.deployment_id = deploymentId;
    if (scope === 'api_key' && apiKeyId) body.api_key_id = apiKeyId;
    if (scope === 'end_user') body.end_user_id = each ? EACH : subject.trim();
    if (scope === 'tool') body.tool_name = each ? EACH : subject.trim();
    const credits = wholeOrNull(limits.credits);
    const aiTokens = wholeOrNull(limits.aiTokens);
    if (credits !== null) body.limit_credits = credits;
    if (aiTokens !== null) body.limit_ai_tokens = aiTokens;
    void action.run(async () => onDone(await api.POST('/organizations/{id}/budgets', { params: { path: { id: orgId } }, body })));
  };

  const who = scope === 'tool' ? 'tool' : 'end user';
  return (
    <section aria-labelledby="new-budget" className="panel">
      <h2 id="new-budget">New budget</h2>
      <form onSubmit={submit}>
        <div className="form-grid">
          <FormField label="What it caps" error={errors.scope}>
            {(c) => (
              <select
                {...c}
                value={scope}
                onChange={(e) => {
                  setScope(e.target.value as Scope);
                  setSubject('');
                  setEach(true);
                }}
              >
                {SCOPES.map((s) => (
                  <option key={s.value} value={s.value}>
                    {s.label}
                  </option>
                ))}
              </select>
            )}
          </FormField>
          <FormField
            label={scope === 'deployment' ? 'Deployment' : 'Only for deployment'}
            hint={scope === 'deployment' ? undefined : "Optional: the budget holds only for that deployment's charges"}
            error={errors.deployment_id}
          >
            {(c) => (
              <select {...c} value={deploymentId} onChange={(e) => setDeploymentId(e.target.value)}>
                <option value="">{scope === 'deployment' ? 'Choose a deployment' : 'All deployments'}</option>
                {deployments.map((d) => (
                  <option key={d.id} value={d.id}>
                    {d.name}
                    {d.is_primary ? ' (primary)' : ''}
                  </option>
                ))}
              </select>
            )}
          </FormField>
          {scope === 'api_key' ? (
            <FormField label="API key" error={errors.api_key_id}>
              {(c) => (
                <select {...c} value={apiKeyId} onChange={(e) => setApiKeyId(e.target.value)}>
                  <option value="">Choose an API key</option>
                  {keys.map((k) => (
                    <option key={k.id} value={k.id}>
                      {k.name} ({k.key_prefix}…)
                    </option>
                  ))}
                </select>
              )}
            </FormField>
          ) : null}
        </div>
        {scope === 'end_user' || scope === 'tool' ? (
          <fieldset className="choices">
            <legend>{scope === 'tool' ? 'Tools' : 'End users'}</legend>
            <CheckLabel checked={each} onChange={setEach}>
              Each {who} separately <span className="muted">(one counter per {who}, each with this limit)</span>
            </CheckLabel>
            {!each ? (
              <FormField label={scope === 'tool' ? 'Tool name' : 'End user id'} error={scope === 'tool' ? errors.tool_name : errors.end_user_id}>
                {(c) => <input {...c} type="text" maxLength={200} value={subject} onChange={(e) => setSubject(e.target.value)} />}
              </FormField>
            ) : errors.end_user_id || errors.tool_name ? (
              <FieldMessage id="budget-subject-error">{errors.end_user_id ?? errors.tool_name}</FieldMessage>
            ) : null}
          </fieldset>
        ) : null}
        <LimitFields value={limits} onChange={setLimits} errors={errors} />
        <ErrorNote error={action.error} />
        <span className="row">
          <button type="submit" disabled={action.busy}>
            Create budget
          </button>
          <button type="button" className="secondary" onClick={() => onDone(null)}>
            Cancel
          </button>
        </span>
      </form>
    </section>
  );
}

function EditBudget({ budget, title, save, onDone }: { budget: Budget; title: string; save: (body: UpdateBody) => Promise<Budget>; onDone: (saved: Budget | null) => void }) {
  const [limits, setLimits] = useState<Limits>({
    credits: budget.limit_credits === null ? '' : String(budget.limit_credits),
    aiTokens: budget.limit_ai_tokens === null ? '' : String(budget.limit_ai_tokens),
    window: budget.window,
    mode: budget.mode,
    thresholds: budget.alert_thresholds.join(', '),
  });
  const action = useAction();
  const errors = fieldErrorsOf(action.error);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    // An emptied limit is sent as null: the API removes it while the other remains (docs/budgets.md, Changes).
    const body: UpdateBody = {
      limit_credits: wholeOrNull(limits.credits),
      limit_ai_tokens: wholeOrNull(limits.aiTokens),
      window: limits.window,
      mode: limits.mode,
      alert_thresholds: thresholdsOf(limits.thresholds),
    };
    void action.run(async () => onDone(await save(body)));
  };
  return (
    <section aria-labelledby="edit-budget" className="panel">
      <h2 id="edit-budget">Edit the budget for {title.toLowerCase()}</h2>
      <p className="muted small">What a budget caps cannot change; a budget for something else is a new budget. Windows already counted are kept.</p>
      <form onSubmit={submit}>
        <LimitFields value={limits} onChange={setLimits} errors={errors} />
        <ErrorNote error={action.error} />
        <span className="row">
          <button type="submit" disabled={action.busy}>
            Save budget
          </button>
          <button type="button" className="secondary" onClick={() => onDone(null)}>
            Cancel
          </button>
        </span>
      </form>
    </section>
  );
}
