import { type ReactNode, useMemo, useState } from 'react';
import { Link } from 'wouter';
import { api } from '../api';
import { ApiError } from '../api-errors';
import { StackedBars } from '../chart';
import { useOrg } from '../org';
import { RangePicker } from '../RangePicker';
import {
  browserZone,
  dayLabel,
  parseRange,
  type RangeChoice,
  rangeQuery,
  rangeSearch,
  stackOf,
  topOf,
  type UsageGroup,
  type UsageSummary,
} from '../series';
import { plural } from '../plural';
import { fmtDate, fmtDay, fmtInt, Loading, LoadError, PageHeader, useLoad } from '../ui';
import type { Schemas } from '../types';
import './extra.css';
import { BalanceHistory } from './BalanceHistory';

export type Balance = Schemas['CreditBalance'];

export type Deployment = Schemas['Deployment'];

/** The range in words, for the heading and the empty states. */
function rangeWords(range: RangeChoice): string {
  return 'days' in range ? `the last ${range.days} days` : `${range.from} to ${range.to}`;
}

export function Overview() {
  const { org, can } = useOrg();
  const path = { id: org.id };
  // The range is in the address (?range=7d, or ?from=…&to=…), so a reload or a shared link keeps it.
  const [range, setRange] = useState<RangeChoice>(() => parseRange(window.location.search));
  const choose = (next: RangeChoice) => {
    setRange(next);
    window.history.replaceState(window.history.state, '', `${window.location.pathname}?${rangeSearch(next)}`);
  };
  const asked = browserZone();
  const rangeKey = rangeSearch(range);
  // Instants of the user's zone; the summaries without day buckets take the same ones, so every total agrees.
  // biome-ignore lint/correctness/useExhaustiveDependencies: the range is named by its query string
  const span = useMemo(() => rangeQuery(range, asked, new Date()), [rangeKey, asked]);
  const deployments = useLoad(() => api.list('/organizations/{id}/deployments', { params: { path, query: { limit: 100 } } }), [org.id]);
  const ai = useLoad(
    () => (can('billing.read') ? api.GET('/billing/usage', { params: { query: { organization_id: org.id } } }) : Promise.resolve(null)),
    [org.id],
  );
  // A preset runs up to the service's own now (no `to`). Days of the browser's zone; one the service
  // cannot bucket by (an offset of half an hour) falls back to UTC days.
  const daily = useLoad(async () => {
    const summary = (tz?: string) => api.GET('/organizations/{id}/usage/summary', { params: { path, query: { group_by: 'day', split_by: 'tool', ...span, tz } } });
    if (asked === 'UTC') return summary();
    try {
      return await summary(asked);
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) return summary();
      throw err;
    }
  }, [org.id, span]);
  // A viewer sees end users as *** and may not group by them (docs/usage-analytics.md, Who may read).
  const seesEndUsers = org.role !== 'viewer';
  const users = useLoad(
    () => (seesEndUsers ? api.GET('/organizations/{id}/usage/summary', { params: { path, query: { group_by: 'mcp_user', ...span } } }) : Promise.resolve(undefined)),
    [org.id, span, seesEndUsers],
  );
  const models = useLoad(() => api.GET('/organizations/{id}/usage/summary', { params: { path, query: { group_by: 'model', ...span } } }), [org.id, span]);
  const perDeployment = useLoad(() => api.GET('/organizations/{id}/usage/summary', { params: { path, query: { group_by: 'deployment', ...span } } }), [org.id, span]);
  const stack = useMemo(() => (daily.data ? stackOf(daily.data) : null), [daily.data]);
  const zone = daily.data?.tz ?? 'UTC';
  // The top tools come from the same answer: split_keys are the range's largest tools in group_by=tool's order.
  const tools = useMemo(() => (daily.data ? topOf(daily.data) : undefined), [daily.data]);

  const primary = deployments.data?.data.find((d) => d.is_primary);
  const b = primary?.balance;
  const names = new Map((deployments.data?.data ?? []).map((d) => [d.id, d.name]));
  // A new organization starts on sandbox, with no credits: its first step is Billing, not an API key.
  const needsCredits = primary?.tier === 'sandbox' && b?.available === 0;
  const aiModels = models.data ? { ...models.data, groups: models.data.groups.filter((g) => g.key !== null) } : undefined;
  return (
    <>
      <PageHeader title={org.name}>
        <span className="badge">plan {org.tier}</span>
        {primary ? <span className="badge">tier {primary.tier}</span> : null}
      </PageHeader>
      <LoadError error={deployments.error} retry={deployments.reload} what="the balance" busy={deployments.loading} />
      <LoadError error={ai.error} retry={ai.reload} what="the AI token limit" busy={ai.loading} />
      {b ? (
        <section className="cards" aria-label="Balance">
          <Card title="Monthly credits" testId="monthly" value={fmtInt(b.monthly_used)} of={fmtInt(b.monthly_allocation)} note={`${fmtInt(b.monthly_remaining)} left`} />
          <Card title="Purchased credits" testId="purchased" value={fmtInt(b.purchased)} note="never reset">
            {can('billing.read') ? (
              <p className="card-link">
                <Link href="/billing#packs">Buy credits</Link>
              </p>
            ) : null}
          </Card>
          <Card title="Available now" testId="available" value={fmtInt(b.available)} note={`${fmtInt(b.reserved)} held by reservations`} />
          <Card
            title="AI tokens"
            testId="ai-tokens"
            value={fmtInt(b.ai_tokens_used)}
            of={ai.data ? fmtInt(ai.data.ai_tokens.limit) : ai.error ? '—' : '…'}
            note="used this period"
          />
          <Card title="Period ends" testId="period-end" value={fmtDay(b.period_end)} note={fmtDate(b.period_end)} />
        </section>
      ) : deployments.loading ? (
        <Loading what="the balance" shape="cards" rows={5} />
      ) : null}

      <section aria-labelledby="per-day">
        <h2 id="per-day">
          Credits per day, by tool ({rangeWords(range)}, {zone})
        </h2>
        <RangePicker value={range} onChange={choose} today={dayLabel(Date.now() / 1000, asked)} />
        <p className="muted small zone-note" data-testid="zone">
          {daily.data ? (
            zone === asked ? (
              <>
                Days of your time zone, <strong>{zone}</strong>.
              </>
            ) : (
              <>
                Days in <strong>{zone}</strong>: your time zone, {asked}, is not a whole number of hours from UTC.
              </>
            )
          ) : (
            <>Your time zone: {asked}.</>
          )}
        </p>
        <LoadError error={daily.error} retry={daily.reload} what="usage per day" busy={daily.loading} />
        {stack && daily.data ? (
          daily.data.totals.calls === 0 ? (
            <div className="onboarding" data-testid="no-usage">
              {needsCredits ? (
                <>
                  <p>
                    <strong>This organization has no credits yet.</strong> It is on the sandbox tier, which includes none, so every call is refused until it
                    has some.
                  </p>
                  {can('billing.read') ? (
                    <p className="actions">
                      <Link href="/billing#packs">Buy credits</Link>
                      <Link href="/billing">Choose a plan</Link>
                    </p>
                  ) : (
                    <p>An owner or an admin can buy credits or choose a plan on the Billing page.</p>
                  )}
                </>
              ) : (
                <>
                  <p>
                    <strong>No usage in {rangeWords(range)}.</strong>{' '}
                    {can('api_keys.read') ? <Link href="/api-keys">Create your first API key</Link> : 'Ask an owner or an admin for an API key'}, then
                    record a call with it:
                  </p>
                  <pre className="snippet" data-testid="first-call">
                    <code>{firstCall(primary?.id)}</code>
                  </pre>
                </>
              )}
            </div>
          ) : (
            <>
              <p>
                <strong data-testid="credits-total">{fmtInt(daily.data.totals.credits)}</strong> {plural(daily.data.totals.credits, 'credit')} over{' '}
                <strong data-testid="calls-total">{fmtInt(daily.data.totals.calls)}</strong> {plural(daily.data.totals.calls, 'call')} ({fmtInt(daily.data.totals.failed)}{' '}
                refused).
              </p>
              <StackedBars
                times={stack.times}
                series={stack.series}
                label={`Credits per day by tool, ${daily.data.totals.credits} in all`}
                tz={zone}
              />
              <details>
                <summary>Show as a table</summary>
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Day ({zone})</th>
                      {stack.series.map((s, n) => (
                        // biome-ignore lint/suspicious/noArrayIndexKey: the series are fixed for this answer; names may repeat
                        <th scope="col" key={n}>
                          {s.name}
                        </th>
                      ))}
                    </tr>
                  </thead>
                  <tbody>
                    {stack.times.map((t, i) => (
                      <tr key={t}>
                        <th scope="row">{dayLabel(t, zone)}</th>
                        {stack.series.map((s, n) => (
                          // biome-ignore lint/suspicious/noArrayIndexKey: as in the header row
                          <td key={n}>{s.values[i]}</td>
                        ))}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </details>
            </>
          )
        ) : daily.error ? null : (
          <Loading what="usage per day" shape="chart" />
        )}
      </section>
      {/* Below the chart, so its late arrival moves nothing the eye (or a pointer) is on. */}
      <BalanceHistory orgId={org.id} from={span.from} to={span.to} tz={asked} />

      <div className="columns">
        <TopList title="Top tools" summary={tools} load={daily} empty="No tool calls yet" testId="top-tools" />
        {seesEndUsers ? <TopList title="Top end users" summary={users.data} load={users} empty="No end users yet (stdio mode has none)" testId="top-users" /> : null}
      </div>
      <div className="columns">
        <Breakdown
          title="AI tokens by model"
          summary={aiModels}
          load={models}
          empty={`No AI calls in ${rangeWords(range)}.`}
          testId="by-model"
          head={['Model', 'Input tokens', 'Output tokens', 'Credits']}
          cells={(g) => [g.key ?? '', fmtInt(g.input_tokens), fmtInt(g.output_tokens), fmtInt(g.credits)]}
        />
        <Breakdown
          title="By deployment"
          summary={perDeployment.data}
          load={perDeployment}
          empty={`No calls in ${rangeWords(range)}.`}
          testId="by-deployment"
          head={['Deployment', 'Calls', 'Credits']}
          cells={(g) => [names.get(g.key ?? '') ?? g.key ?? '(none)', fmtInt(g.calls), fmtInt(g.credits)]}
        />
      </div>
      <p>
        <Link href="/usage">Explore every call →</Link>
      </p>
    </>
  );
}

/** The first call to make, with an API key: a tool call recorded on the organization's primary deployment. */
function firstCall(deploymentId: string | undefined): string {
  return [
    `# Records a call on deployment ${deploymentId ?? '…'} (this organization's primary)`,
    `curl -X POST ${window.location.origin}/api/v1/mcp/stdio/record-usage \\`,
    '  -H "Authorization: Bearer $CREDITGATE_API_KEY" \\',
    '  -H "Content-Type: application/json" \\',
    `  -d '{"tool_name": "my_tool"}'`,
  ].join('\n');
}

/**
 * A figure of the overview. `of` is the limit a used amount is out of ("1,081 / 20,000"): set smaller
 * and kept whole, so a narrow card breaks the line before it rather than inside a number.
 */
function Card({
  title,
  value,
  of,
  note,
  testId,
  children,
}: { title: string; value: string; of?: string; note: string; testId: string; children?: ReactNode }) {
  return (
    <div className="card" data-testid={`card-${testId}`}>
      <h2>{title}</h2>
      <p className="value">
        {value}
        {of !== undefined ? <span className="value-of"> / {of}</span> : null}
      </p>
      <p className="muted small">{note}</p>
      {children}
    </div>
  );
}

/** A summary grouped by something other than time, as a small table (the largest ten), or a sentence when empty. */
function Breakdown({
  title,
  summary,
  load,
  empty,
  testId,
  head,
  cells,
}: {
  title: string;
  summary: UsageSummary | undefined;
  load: { error: unknown; loading: boolean; reload: () => void };
  empty: string;
  testId: string;
  head: string[];
  cells: (g: UsageGroup) => string[];
}) {
  return (
    <section aria-label={title} data-testid={testId}>
      <h2>{title}</h2>
      <LoadError error={load.error} retry={load.reload} what={title.toLowerCase()} busy={load.loading} />
      {!summary ? (
        load.error ? null : <Loading what={title.toLowerCase()} shape="table" />
      ) : summary.groups.length === 0 ? (
        <p className="muted">{empty}</p>
      ) : (
        <div className="table-scroll">
          <table>
            <thead>
              <tr>
                {head.map((h) => (
                  <th scope="col" key={h}>
                    {h}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {summary.groups.slice(0, 10).map((g) => (
                <tr key={g.key ?? '(none)'}>
                  {cells(g).map((c, i) => (
                    // biome-ignore lint/suspicious/noArrayIndexKey: the columns are fixed
                    <td key={i}>{c}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function TopList({
  title,
  summary,
  load,
  empty,
  testId,
}: {
  title: string;
  summary: UsageSummary | undefined;
  load: { error: unknown; loading: boolean; reload: () => void };
  empty: string;
  testId: string;
}) {
  return (
    <section aria-label={title} data-testid={testId}>
      <h2>{title}</h2>
      <LoadError error={load.error} retry={load.reload} what={title.toLowerCase()} busy={load.loading} />
      {!summary ? (
        load.error ? null : <Loading what={title.toLowerCase()} shape="table" />
      ) : summary.groups.length === 0 ? (
        <p className="muted">{empty}</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Calls</th>
              <th scope="col">Credits</th>
            </tr>
          </thead>
          <tbody>
            {summary.groups.slice(0, 5).map((g) => (
              <tr key={g.key ?? '(none)'}>
                <td>{g.key ?? '(none)'}</td>
                <td>{fmtInt(g.calls)}</td>
                <td>{fmtInt(g.credits)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
