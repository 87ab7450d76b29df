import { type FormEvent, useState } from 'react';
import { api } from '../api';
import { useOrg } from '../org';
import { CheckLabel, ConfirmButton, ErrorNote, Field, fmtDate, Loading, LoadError, PageHeader, SecretOnce, StatusNote, useAction, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import { LoadMore, usePages } from './paging';
import type { Schemas } from '../types';
import type { BodyOf } from './form-fields';

/** An organization webhook as /organizations/{id}/webhooks answers it (docs/webhooks.md). */
export type Webhook = Schemas['Webhook'];

export type Delivery = Schemas['WebhookDelivery'];
type Change = BodyOf<'updateWebhook'>;
type EventType = NonNullable<Change['events']>[number];

/**
 * The events a webhook may subscribe to: the API's list (EVENT_TYPES in src/modules/webhooks/organization.ts;
 * the console's webhooks test checks the two agree), with what each means.
 */
export const WEBHOOK_EVENTS: Array<{ type: EventType; meaning: string }> = [
  { type: 'organization.member.added', meaning: 'a member joined' },
  { type: 'organization.member.removed', meaning: 'a member was removed or left' },
  { type: 'subscription.updated', meaning: 'the subscription changed' },
  { type: 'api_key.created', meaning: 'an API key was created' },
  { type: 'api_key.revoked', meaning: 'an API key was revoked' },
  { type: 'credits.purchased', meaning: 'purchased credits were added' },
  { type: 'quota.threshold', meaning: 'a deployment used 80 % or 100 % of a quota' },
  { type: 'deployment.tier_changed', meaning: "a deployment's tier changed" },
  { type: 'budget.threshold', meaning: 'a budget reached one of its alert thresholds' },
  { type: 'budget.exceeded', meaning: 'a block budget refused a charge' },
  { type: 'auto_top_up.succeeded', meaning: 'an auto top-up was paid and its credits added' },
  { type: 'auto_top_up.failed', meaning: 'an auto top-up could not be paid' },
  { type: 'auto_top_up.disabled', meaning: 'three failed auto top-ups in a row switched it off' },
];

/** The delivery worker's limit (MAX_ATTEMPTS): a delivery with this many attempts cannot be retried. */
const MAX_ATTEMPTS = 5;

/** What the page last did, in words, and whether it worked. */
interface Notice {
  tone: 'success' | 'failure' | 'neutral';
  text: string;
}

/** A test send's outcome: delivered is a success; failed is a failure and says so; anything else is still on its way. */
export function testOutcome(url: string, d: Pick<Delivery, 'status' | 'status_code' | 'error'>): Notice {
  const error = d.error ? ` (${d.error})` : '';
  if (d.status === 'delivered') return { tone: 'success', text: `Test sent to ${url}: delivered, HTTP ${d.status_code ?? '—'}.` };
  if (d.status === 'failed') {
    // An answer's status says it all (the error only repeats it); without one the error says what happened.
    const answer = d.status_code !== null ? `${url} answered HTTP ${d.status_code}` : `${url} could not be reached${error}`;
    return { tone: 'failure', text: `Test send failed: ${answer}.` };
  }
  return { tone: 'neutral', text: `Test sent to ${url}: ${d.status}${error}.` };
}

export function Webhooks() {
  const { org, can } = useOrg();
  const id = org.id;
  const hooks = useLoad(() => api.GET('/organizations/{id}/webhooks', { params: { path: { id } } }), [id]);
  const [secret, setSecret] = useState<{ url: string; value: string } | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [editing, setEditing] = useState<string | null>(null);
  const [notice, setNotice] = useState<Notice | null>(null);
  const [round, setRound] = useState(0);
  const action = useAction();
  const manage = can('webhooks.manage');

  if (!can('webhooks.read')) return <NoAccess what="webhooks" />;

  const patch = (webhookId: string, body: Change) => api.PATCH('/organizations/{id}/webhooks/{webhookId}', { params: { path: { id, webhookId } }, body });
  const testSend = (hook: Webhook) =>
    action.run(async () => {
      setNotice(null);
      const d = await api.POST('/organizations/{id}/webhooks/{webhookId}/test', { params: { path: { id, webhookId: hook.id } } });
      setSelected(hook.id);
      setRound((r) => r + 1);
      setNotice(testOutcome(hook.url, d));
    });
  const setActive = (hook: Webhook, isActive: boolean) =>
    action.run(async () => {
      setNotice(null);
      await patch(hook.id, { is_active: isActive });
      hooks.reload();
      setNotice({ tone: 'success', text: `${hook.url} is ${isActive ? 'enabled' : 'disabled'}.` });
    });
  const remove = (hook: Webhook) =>
    action.run(async () => {
      setNotice(null);
      await api.DELETE('/organizations/{id}/webhooks/{webhookId}', { params: { path: { id, webhookId: hook.id } } });
      if (selected === hook.id) setSelected(null);
      if (editing === hook.id) setEditing(null);
      hooks.reload();
      setNotice({ tone: 'success', text: `${hook.url} is deleted.` });
    });

  const editedHook = hooks.data?.find((h) => h.id === editing);
  const selectedHook = hooks.data?.find((h) => h.id === selected);
  return (
    <>
      <PageHeader title="Webhooks" />
      <p className="muted">
        Signed POST requests to your URL when something happens in the organization (Standard Webhooks signatures; failed deliveries are retried
        for about 1 h 15 min over five attempts).
      </p>

      {secret ? (
        <SecretOnce label={`Signing secret of ${secret.url}`} value={secret.value} onDone={() => setSecret(null)} />
      ) : manage ? (
        <NewWebhook
          orgId={id}
          onCreated={(hook, value) => {
            setSecret({ url: hook.url, value });
            hooks.reload();
          }}
        />
      ) : null}

      <section aria-labelledby="webhook-list">
        <h2 id="webhook-list">Endpoints</h2>
        <LoadError error={hooks.error} retry={hooks.reload} what="webhooks" busy={hooks.loading} />
        <ErrorNote error={action.error} />
        {notice ? (
          <StatusNote tone={notice.tone} testId="webhook-notice">
            {notice.text}
          </StatusNote>
        ) : null}
        {!hooks.data ? (
          hooks.error ? null : <Loading what="webhooks" shape="table" rows={2} />
        ) : hooks.data.length === 0 ? (
          <p className="muted">No webhooks yet.</p>
        ) : (
          <table data-testid="webhooks">
            <thead>
              <tr>
                <th scope="col">URL</th>
                <th scope="col">Events</th>
                <th scope="col">State</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {hooks.data.map((hook) => (
                <tr key={hook.id}>
                  <td>
                    <code>{hook.url}</code>
                  </td>
                  <td>{hook.events.join(', ')}</td>
                  <td>{hook.is_active ? 'Active' : `Disabled${hook.disabled_reason ? `: ${hook.disabled_reason}` : ''}`}</td>
                  <td>
                    <span className="row">
                      <button type="button" className="secondary" onClick={() => setSelected(hook.id)} aria-pressed={selected === hook.id}>
                        Deliveries
                      </button>
                      {manage ? (
                        <>
                          <button type="button" onClick={() => void testSend(hook)} disabled={action.busy || !hook.is_active}>
                            Test send
                          </button>
                          <button type="button" className="secondary" onClick={() => setEditing(hook.id)}>
                            Edit
                          </button>
                          <button type="button" className="secondary" onClick={() => void setActive(hook, !hook.is_active)} disabled={action.busy}>
                            {hook.is_active ? 'Disable' : 'Enable'}
                          </button>
                          <ConfirmButton label="Delete" confirmLabel="Delete webhook" onConfirm={() => remove(hook).then(() => undefined)} />
                        </>
                      ) : null}
                    </span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      {editedHook && manage ? (
        <EditWebhook
          key={editedHook.id}
          hook={editedHook}
          save={(body) => patch(editedHook.id, body)}
          onDone={(changed) => {
            setEditing(null);
            if (changed) {
              hooks.reload();
              setNotice({ tone: 'success', text: `${changed.url} is saved.` });
            }
          }}
        />
      ) : null}

      {selectedHook ? <Deliveries orgId={id} hook={selectedHook} manage={manage} round={round} /> : null}
    </>
  );
}

function EventChoices({ chosen, onChange }: { chosen: EventType[]; onChange: (events: EventType[]) => void }) {
  return (
    <fieldset className="field">
      <legend>Events</legend>
      {WEBHOOK_EVENTS.map((e) => (
        <CheckLabel key={e.type} checked={chosen.includes(e.type)} onChange={(on) => onChange(on ? [...chosen, e.type] : chosen.filter((t) => t !== e.type))}>
          <code>{e.type}</code> <span className="muted">{e.meaning}</span>
        </CheckLabel>
      ))}
    </fieldset>
  );
}

function NewWebhook({ orgId, onCreated }: { orgId: string; onCreated: (hook: Webhook, secret: string) => void }) {
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<EventType[]>([]);
  const action = useAction();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void action.run(async () => {
      const created = await api.POST('/organizations/{id}/webhooks', { params: { path: { id: orgId } }, body: { url: url.trim(), events } });
      const { secret, ...hook } = created;
      setUrl('');
      setEvents([]);
      onCreated(hook, secret);
    });
  };
  return (
    <section aria-labelledby="new-webhook">
      <h2 id="new-webhook">New webhook</h2>
      <form className="narrow" onSubmit={submit}>
        <Field label="URL" hint="https; the receiver must answer 2xx within 10 s">
          <input type="url" value={url} onChange={(e) => setUrl(e.target.value)} required maxLength={2048} placeholder="https://example.com/hooks" />
        </Field>
        <EventChoices chosen={events} onChange={setEvents} />
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy || events.length === 0}>
          Create webhook
        </button>
      </form>
    </section>
  );
}

function EditWebhook({ hook, save, onDone }: { hook: Webhook; save: (body: Change) => Promise<Webhook>; onDone: (changed: Webhook | null) => void }) {
  const [url, setUrl] = useState(hook.url);
  // The events the console offers that the webhook has (the answer names them as strings).
  const [events, setEvents] = useState(WEBHOOK_EVENTS.map((e) => e.type).filter((t) => hook.events.includes(t)));
  const action = useAction();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void action.run(async () => onDone(await save({ url: url.trim(), events })));
  };
  return (
    <section aria-labelledby="edit-webhook">
      <h2 id="edit-webhook">Edit {hook.url}</h2>
      <form className="narrow" onSubmit={submit}>
        <Field label="URL">
          <input type="url" value={url} onChange={(e) => setUrl(e.target.value)} required maxLength={2048} />
        </Field>
        <EventChoices chosen={events} onChange={setEvents} />
        <ErrorNote error={action.error} />
        <span className="row">
          <button type="submit" disabled={action.busy || events.length === 0}>
            Save webhook
          </button>
          <button type="button" className="secondary" onClick={() => onDone(null)}>
            Cancel
          </button>
        </span>
      </form>
    </section>
  );
}

function Deliveries({ orgId, hook, manage, round }: { orgId: string; hook: Webhook; manage: boolean; round: number }) {
  const path = { id: orgId, webhookId: hook.id };
  const pages = usePages(
    (cursor) => api.list('/organizations/{id}/webhooks/{webhookId}/deliveries', { params: { path, query: { limit: 20, cursor: cursor ?? undefined } } }),
    [orgId, hook.id, round],
  );
  const retry = useAction();
  const [notice, setNotice] = useState<string | null>(null);
  const retryOne = (d: Delivery) =>
    retry.run(async () => {
      setNotice(null);
      await api.POST('/organizations/{id}/webhooks/{webhookId}/deliveries/{deliveryId}/retry', { params: { path: { ...path, deliveryId: d.id } } });
      pages.reload();
      setNotice('Retry queued: the delivery worker sends it within seconds. Refresh to see the outcome.');
    });
  return (
    <section aria-labelledby="deliveries">
      <header className="page-header">
        <h2 id="deliveries">Deliveries to {hook.url}</h2>
        <button type="button" className="secondary" onClick={pages.reload} disabled={pages.loading}>
          Refresh
        </button>
      </header>
      <LoadError error={pages.error} retry={pages.retry} what="deliveries" busy={pages.loading || pages.loadingMore} />
      <ErrorNote error={retry.error} />
      {notice ? <StatusNote tone="neutral">{notice}</StatusNote> : null}
      {pages.loading && pages.items.length === 0 ? (
        <Loading what="deliveries" shape="table" />
      ) : pages.error && pages.items.length === 0 ? null : pages.items.length === 0 ? (
        <p className="muted">No deliveries yet. Use Test send to try the endpoint.</p>
      ) : (
        <table data-testid="deliveries" aria-busy={pages.loading}>
          <thead>
            <tr>
              <th scope="col">Created</th>
              <th scope="col">Event</th>
              <th scope="col">Status</th>
              <th scope="col" className="num">
                Attempts
              </th>
              <th scope="col">Response</th>
              <th scope="col">Response body</th>
              <th scope="col">Next attempt</th>
              {manage ? <th scope="col">Retry</th> : null}
            </tr>
          </thead>
          <tbody>
            {pages.items.map((d) => (
              <tr key={d.id} data-delivery={d.id}>
                <td>{fmtDate(d.created_at)}</td>
                <td>
                  <code>{d.event_type ?? '—'}</code>
                </td>
                <td>
                  <span className={`status status-${d.status}`}>{d.status}</span>
                  {d.error ? <div className="muted small">{d.error}</div> : null}
                </td>
                <td className="num">{d.attempt_count}</td>
                <td>{d.status_code !== null ? `HTTP ${d.status_code}` : '—'}</td>
                <td>{d.response_body ? <code className="excerpt">{d.response_body.slice(0, 200)}</code> : <span className="muted">—</span>}</td>
                <td>{d.status === 'pending' ? fmtDate(d.next_retry_at) : '—'}</td>
                {manage ? (
                  <td>
                    {d.status !== 'delivered' && d.attempt_count < MAX_ATTEMPTS ? (
                      <button type="button" className="secondary" onClick={() => void retryOne(d)} disabled={retry.busy}>
                        Retry
                      </button>
                    ) : null}
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {pages.items.length > 0 ? <LoadMore pages={pages} one="delivery" other="deliveries" /> : null}
    </section>
  );
}
