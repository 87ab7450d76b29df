import { type FormEvent, useState } from 'react';
import { Field, fmtDate, Loading, PageHeader, useLoad } from '../../ui';
import { OperatorError, type OrganizationHit, useOperator } from './common';
import { OrganizationDetail } from './OrganizationDetail';

interface SearchReply {
  organizations: OrganizationHit[];
  next_cursor: string | null;
}

const PAGE = 20;

/** Find an organization (by name, slug, id, deployment id or member email) and open it. */
export function Organizations() {
  const call = useOperator();
  const [typed, setTyped] = useState('');
  const [query, setQuery] = useState('');
  const [round, setRound] = useState(0);
  const [selected, setSelected] = useState<OrganizationHit | null>(null);
  const first = useLoad(
    () => call.GET('/api/v1/admin/organizations', { params: { query: { q: query, limit: PAGE } } }),
    [call, query, round],
  );
  // Further pages, appended by "Show more", belong to the first page they continue: a new search or a
  // refresh (a new first page) starts again from its own cursor.
  const [more, setMore] = useState<{ after: SearchReply | undefined; hits: OrganizationHit[]; next: string | null; error: unknown; busy: boolean }>({
    after: undefined,
    hits: [],
    next: null,
    error: null,
    busy: false,
  });
  const extra = more.after === first.data ? more : { after: first.data, hits: [], next: first.data?.next_cursor ?? null, error: null, busy: false };
  const hits = [...(first.data?.organizations ?? []), ...extra.hits];
  // The open organization as the latest answer has it (a change elsewhere on the page may have moved its plan or tier).
  const shown = hits.find((o) => o.id === selected?.id) ?? selected;
  const showMore = async () => {
    if (!extra.next) return;
    const base = { ...extra, busy: false };
    setMore({ ...base, busy: true, error: null });
    try {
      const page = await call.GET('/api/v1/admin/organizations', { params: { query: { q: query, limit: PAGE, cursor: extra.next } } });
      setMore({ ...base, hits: [...base.hits, ...page.organizations], next: page.next_cursor, error: null });
    } catch (error) {
      setMore({ ...base, error });
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setQuery(typed.trim());
    setRound((r) => r + 1);
  };

  return (
    <>
      <PageHeader title="Operator" />
      <section aria-labelledby="find-organization">
        <h2 id="find-organization">Find an organization</h2>
        <search>
          <form className="inline" onSubmit={submit}>
          <Field label="Search">
            <input
              type="search"
              maxLength={320}
              size={40}
              value={typed}
              onChange={(e) => setTyped(e.target.value)}
              aria-describedby="search-hint"
            />
          </Field>
          <button type="submit" disabled={first.loading}>
            Search
          </button>
          </form>
        </search>
        <p id="search-hint" className="muted small">
          Part of a name or slug, an organization or deployment id, or a member's email address. Empty: the newest organizations.
        </p>
        <OperatorError error={first.error} retry={first.reload} what="organizations" busy={first.loading} />
        {first.loading && !first.data && !first.error ? <Loading what="organizations" shape="table" /> : null}
        {first.data ? (
          hits.length === 0 ? (
            <p className="muted" role="status">
              No organization matches {query ? <q>{query}</q> : null}.
            </p>
          ) : (
            <table aria-label="Organizations found" data-testid="organization-results">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Slug</th>
                  <th scope="col">Plan</th>
                  <th scope="col">Deployment tier</th>
                  <th scope="col">Created</th>
                  <th scope="col">Status</th>
                </tr>
              </thead>
              <tbody>
                {hits.map((o) => (
                  <tr key={o.id} className={shown?.id === o.id ? 'selected' : undefined}>
                    <td>
                      <button type="button" className="link" onClick={() => setSelected(o)}>
                        {o.name}
                      </button>
                    </td>
                    <td>
                      <code>{o.slug}</code>
                    </td>
                    <td>{o.plan}</td>
                    <td>{o.primary_deployment_tier ?? '—'}</td>
                    <td>{fmtDate(o.created_at)}</td>
                    <td>{o.deleted_at ? `Deleted ${fmtDate(o.deleted_at)}` : 'Active'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        ) : null}
        <OperatorError error={extra.error} />
        {extra.next ? (
          <p>
            <button type="button" className="secondary" disabled={extra.busy} onClick={() => void showMore()}>
              Show more
            </button>
          </p>
        ) : null}
      </section>
      {shown ? (
        <OrganizationDetail
          key={shown.id}
          organization={shown}
          onPlanChanged={(plan) => setSelected({ ...shown, plan })}
          onChanged={() => setRound((r) => r + 1)}
          onClose={() => setSelected(null)}
        />
      ) : null}
    </>
  );
}
