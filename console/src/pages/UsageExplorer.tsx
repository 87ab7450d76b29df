import { type FormEvent, useState } from 'react';
import { api, textPart } from '../api';
import { useOrg } from '../org';
import { countOf } from '../plural';
import { ErrorNote, Field, fmtInt, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import { LoadMore, usePages } from './paging';
import type { Schemas } from '../types';

/** A usage record as GET /organizations/{id}/usage/records answers it (docs/usage-analytics.md). */
export type UsageRecord = Schemas['UsageRecord'];

/** The filter form's values: dates as the date inputs give them (YYYY-MM-DD, read as UTC days). */
interface Filters {
  from: string;
  to: string;
  deployment: string;
  tool: string;
  user: string;
  outcome: '' | 'true' | 'false';
}

const NO_FILTERS: Filters = { from: '', to: '', deployment: '', tool: '', user: '', outcome: '' };

/** The start of a UTC day as an RFC 3339 instant. */
const dayStart = (day: string) => `${day}T00:00:00Z`;
/** The start of the UTC day after: "to" includes the day chosen (the API's `to` is exclusive). */
function dayAfter(day: string): string {
  const next = new Date(`${day}T00:00:00Z`);
  next.setUTCDate(next.getUTCDate() + 1);
  return next.toISOString().replace('.000Z', 'Z');
}

/** The API's query for the filters (blank fields left out). */
export function queryOf(f: Filters) {
  return {
    from: f.from ? dayStart(f.from) : undefined,
    to: f.to ? dayAfter(f.to) : undefined,
    deployment_id: f.deployment || undefined,
    tool_name: f.tool.trim() || undefined,
    mcp_user_id: f.user.trim() || undefined,
    success: f.outcome ? f.outcome === 'true' : undefined,
  };
}

/** A record's time to the second, UTC. */
const fmtTime = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 19)}`;

/** `20260115T120000Z`, for the file name. */
const stamp = (at: Date) => at.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');

const PAGE = 50;

export function UsageExplorer() {
  const { org, can } = useOrg();
  const base = `/organizations/${org.id}/usage/records`;
  const [form, setForm] = useState<Filters>(NO_FILTERS);
  const [applied, setApplied] = useState<Filters>(NO_FILTERS);
  const query = queryOf(applied);
  const records = usePages((cursor) => api.list('/organizations/{id}/usage/records', { params: { path: { id: org.id }, query: { ...query, limit: PAGE, cursor: cursor ?? undefined } } }), [org.id, JSON.stringify(query)]);
  const deployments = useLoad(() => api.list('/organizations/{id}/deployments', { params: { path: { id: org.id }, query: { limit: 100 } } }), [org.id]);
  const names = new Map((deployments.data?.data ?? []).map((d) => [d.id, d.name]));
  const csv = useAction();
  const [downloaded, setDownloaded] = useState<{ rows: number; file: string } | null>(null);

  if (!can('usage.read')) return <NoAccess what="usage" />;

  const set = (field: keyof Filters) => (e: { target: { value: string } }) => setForm((f) => ({ ...f, [field]: e.target.value }));
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setApplied(form);
  };
  const clear = () => {
    setForm(NO_FILTERS);
    setApplied(NO_FILTERS);
  };

  /** Every part of the export (each holds a header row), joined into one file with one header. */
  const download = () =>
    csv.run(async () => {
      setDownloaded(null);
      let part = await textPart(base, query, 'text/csv');
      let body = part.text;
      while (part.next) {
        part = await textPart(part.next, {}, 'text/csv');
        body += part.text.slice(part.text.indexOf('\r\n') + 2);
      }
      const rows = body.split('\r\n').length - 2; // the header and the empty string after the last CRLF
      const file = `usage-${org.slug}-${stamp(new Date())}.csv`;
      const url = URL.createObjectURL(new Blob([body], { type: 'text/csv;charset=utf-8' }));
      const a = document.createElement('a');
      a.href = url;
      a.download = file;
      document.body.append(a);
      a.click();
      a.remove();
      // The click has handed the blob to the download; the URL is not needed after this turn.
      setTimeout(() => URL.revokeObjectURL(url), 0);
      setDownloaded({ rows, file });
    });

  return (
    <>
      <PageHeader title="Usage">
        <button type="button" onClick={() => void download()} disabled={csv.busy}>
          {csv.busy ? 'Preparing CSV…' : 'Download CSV'}
        </button>
      </PageHeader>
      <p className="muted">Every metered call, newest first. Days are UTC; "To" includes the day chosen. The CSV holds every record matching the filters.</p>
      <ErrorNote error={csv.error} />
      {downloaded ? (
        <StatusNote tone="success" testId="csv-status">
          Downloaded {countOf(downloaded.rows, 'row')} as {downloaded.file}.
        </StatusNote>
      ) : null}

      <form className="inline" onSubmit={submit} aria-label="Filter usage records">
        <Field label="From">
          <input type="date" value={form.from} onChange={set('from')} />
        </Field>
        <Field label="To">
          <input type="date" value={form.to} onChange={set('to')} />
        </Field>
        <Field label="Deployment">
          <select value={form.deployment} onChange={set('deployment')}>
            <option value="">All deployments</option>
            {(deployments.data?.data ?? []).map((d) => (
              <option key={d.id} value={d.id}>
                {d.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Tool">
          <input value={form.tool} onChange={set('tool')} maxLength={200} placeholder="any" />
        </Field>
        {/* A viewer sees end users as *** and may not filter by them (docs/usage-analytics.md, Who may read). */}
        {org.role !== 'viewer' ? (
          <Field label="End user">
            <input value={form.user} onChange={set('user')} maxLength={200} placeholder="any" />
          </Field>
        ) : null}
        <Field label="Outcome">
          <select value={form.outcome} onChange={set('outcome')}>
            <option value="">All</option>
            <option value="true">Charged</option>
            <option value="false">Refused</option>
          </select>
        </Field>
        <button type="submit">Apply filters</button>
        <button type="button" className="secondary" onClick={clear}>
          Clear
        </button>
      </form>

      <LoadError error={deployments.error} retry={deployments.reload} what="deployments" busy={deployments.loading} />
      <LoadError error={records.error} retry={records.retry} what="usage records" busy={records.loading || records.loadingMore} />
      {records.loading && records.items.length === 0 ? (
        <Loading what="usage records" shape="table" rows={5} />
      ) : records.error && records.items.length === 0 ? null : records.items.length === 0 ? (
        <p className="muted" data-testid="no-records">
          No usage records match these filters.
        </p>
      ) : (
        <table aria-busy={records.loading} data-testid="usage-records">
          <caption className="visually-hidden">Usage records, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Time (UTC)</th>
              <th scope="col">Tool</th>
              <th scope="col">Action</th>
              <th scope="col">End user</th>
              <th scope="col">Deployment</th>
              <th scope="col">Outcome</th>
              <th scope="col" className="num">
                Credits
              </th>
              <th scope="col" className="num">
                Refunded
              </th>
            </tr>
          </thead>
          <tbody>
            {records.items.map((r) => (
              <tr key={r.id}>
                <td>{fmtTime(r.timestamp)}</td>
                <td>
                  <code>{r.tool_name}</code>
                </td>
                <td>{r.action}</td>
                <td>{r.mcp_user_id ?? <span className="muted">—</span>}</td>
                <td>{names.get(r.deployment_id) ?? r.deployment_id.slice(0, 8)}</td>
                <td>{r.success ? 'Charged' : `Refused${r.error ? `: ${r.error}` : ''}`}</td>
                <td className="num">{fmtInt(r.credits)}</td>
                <td className="num">{fmtInt(r.credits_refunded)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {records.items.length > 0 ? <LoadMore pages={records} one="record" /> : null}
    </>
  );
}
