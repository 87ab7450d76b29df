import { type FormEvent, useState } from 'react';
import { api } from '../api';
import { useOrg } from '../org';
import { Field, Loading, LoadError, PageHeader, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import { LoadMore, usePages } from './paging';
import type { Schemas } from '../types';

/** GET /organizations/{id}/audit-logs (docs/decisions-keys-billing.md, Audit log): who changed what, newest first. */
export type AuditEntry = Schemas['AuditLogEntry'];

/** An entry's time to the second, UTC. */
const fmtTime = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;

export function Audit() {
  const { org, can } = useOrg();
  const [form, setForm] = useState({ action: '', resource_type: '' });
  const [applied, setApplied] = useState(form);
  const query = { action: applied.action.trim() || undefined, resource_type: applied.resource_type.trim() || undefined };
  const entries = usePages(
    (cursor) => api.list('/organizations/{id}/audit-logs', { params: { path: { id: org.id }, query: { ...query, limit: 50, cursor: cursor ?? undefined } } }),
    [org.id, query.action, query.resource_type],
  );
  // Actors are user ids; members' emails make them readable (an actor who has left stays an id).
  const members = useLoad(
    () => (can('members.read') ? api.list('/organizations/{id}/users', { params: { path: { id: org.id }, query: { limit: 100 } } }) : Promise.resolve({ data: [], next: null })),
    [org.id],
  );
  const emails = new Map((members.data?.data ?? []).map((m) => [m.user_id, m.email]));

  if (!can('audit.read')) return <NoAccess what="the audit log" />;

  const submit = (e: FormEvent) => {
    e.preventDefault();
    setApplied(form);
  };
  const actorOf = (e: AuditEntry) => (e.user_id ? (emails.get(e.user_id) ?? e.actor) : e.actor);

  return (
    <>
      <PageHeader title="Audit log" />
      <p className="muted">Every change to the organization, newest first: who did it, from where, and what changed.</p>
      <form className="inline" onSubmit={submit} aria-label="Filter the audit log">
        <Field label="Action">
          <input value={form.action} onChange={(e) => setForm((f) => ({ ...f, action: e.target.value }))} maxLength={100} placeholder="create, delete…" />
        </Field>
        <Field label="Resource type">
          <input
            value={form.resource_type}
            onChange={(e) => setForm((f) => ({ ...f, resource_type: e.target.value }))}
            maxLength={100}
            placeholder="webhook, api_key…"
          />
        </Field>
        <button type="submit">Apply filters</button>
      </form>
      <LoadError error={entries.error} retry={entries.retry} what="the audit log" busy={entries.loading || entries.loadingMore} />
      {entries.loading && entries.items.length === 0 ? (
        <Loading what="the audit log" shape="table" rows={5} />
      ) : entries.error && entries.items.length === 0 ? null : entries.items.length === 0 ? (
        <p className="muted">No audit entries match.</p>
      ) : (
        <>
          <table data-testid="audit" aria-busy={entries.loading}>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Actor</th>
                <th scope="col">Action</th>
                <th scope="col">Resource</th>
                <th scope="col">Details</th>
              </tr>
            </thead>
            <tbody>
              {entries.items.map((e) => (
                <tr key={e.id}>
                  <td>{fmtTime(e.created_at)}</td>
                  <td>{actorOf(e)}</td>
                  <td>
                    <code>{e.action}</code>
                  </td>
                  <td>
                    {e.resource_type}
                    {e.resource_id ? <div className="muted small">{e.resource_id}</div> : null}
                  </td>
                  <td>
                    <details>
                      <summary>Show</summary>
                      <dl className="facts small">
                        <dt>Actor</dt>
                        <dd>{e.actor}</dd>
                        <dt>From</dt>
                        <dd>
                          {e.ip_address ?? '—'}
                          {e.user_agent ? ` · ${e.user_agent}` : ''}
                        </dd>
                      </dl>
                      <pre className="metadata">{JSON.stringify(e.metadata, null, 2)}</pre>
                    </details>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <LoadMore pages={entries} one="entry" other="entries" />
        </>
      )}
    </>
  );
}
