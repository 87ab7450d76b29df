import { useMemo } from 'react';
import { Link } from 'wouter';
import { get, list } from '../api';
import { ApiError } from '../api-errors';
import { StackedBars } from '../chart';
import { useOrg } from '../org';
import { browserZone, dayLabel, stackOf, topOf, type UsageSummary } from '../series';
import { plural } from '../plural';
import { fmtDate, fmtDay, fmtInt, Loading, LoadError, PageHeader, useLoad } from '../ui';
import type { Schemas } from '../types';

export type Balance = Schemas['CreditBalance'];

export type Deployment = Schemas['Deployment'];

type BillingUsage = Schemas['BillingUsage'];

const DAYS = 30;

export function Overview() {
  const { org, can } = useOrg();
  const base = `/organizations/${org.id}`;
  const deployments = useLoad(() => list<Deployment>(`${base}/deployments`, { limit: 100 }), [org.id]);
  const ai = useLoad(
    () => (can('billing.read') ? get<BillingUsage>('/billing/usage', { organization_id: org.id }) : Promise.resolve(null)),
    [org.id],
  );
  // No from/to: the service's default range, the last 30 days up to its own now (its clock, not the browser's).
  // Days of the browser's zone; one the service cannot bucket by (an offset of half an hour) falls back to UTC.
  const daily = useLoad(async () => {
    const query = { group_by: 'day', split_by: 'tool' };
    const tz = browserZone();
    if (tz === 'UTC') return get<UsageSummary>(`${base}/usage/summary`, query);
    try {
      return await get<UsageSummary>(`${base}/usage/summary`, { ...query, tz });
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) return get<UsageSummary>(`${base}/usage/summary`, query);
      throw err;
    }
  }, [org.id]);
  const users = useLoad(() => get<UsageSummary>(`${base}/usage/summary`, { group_by: 'mcp_user' }), [org.id]);
  const stack = useMemo(() => (daily.data ? stackOf(daily.data) : null), [daily.data]);
  const zone = daily.data?.tz ?? 'UTC';
  // The top tools come from the same answer: split_keys are the range's largest tools in group_by=tool's order.
  const tools = useMemo(() => (daily.data ? topOf(daily.data) : undefined), [daily.data]);

  const primary = deployments.data?.data.find((d) => d.is_primary);
  const b = primary?.balance;
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
          <Card title="Monthly credits" testId="monthly" value={`${fmtInt(b.monthly_used)} / ${fmtInt(b.monthly_allocation)}`} note={`${fmtInt(b.monthly_remaining)} left`} />
          <Card title="Purchased credits" testId="purchased" value={fmtInt(b.purchased)} note="never reset" />
          <Card title="Available now" testId="available" value={fmtInt(b.available)} note={`${fmtInt(b.reserved)} held by reservations`} />
          <Card
            title="AI tokens"
            testId="ai-tokens"
            value={`${fmtInt(b.ai_tokens_used)} / ${ai.data ? fmtInt(ai.data.ai_tokens.limit) : ai.error ? '—' : '…'}`}
            note="used this period"
          />
          <Card title="Period ends" testId="period-end" value={fmtDay(b.period_end)} note={fmtDate(b.period_end)} />
        </section>
      ) : deployments.loading ? (
        <Loading what="the balance" shape="cards" rows={5} />
      ) : null}

      <section aria-labelledby="per-day">
        <h2 id="per-day">
          Credits per day, by tool (last {DAYS} days, {zone})
        </h2>
        <LoadError error={daily.error} retry={daily.reload} what="usage per day" busy={daily.loading} />
        {stack && daily.data ? (
          daily.data.totals.calls === 0 ? (
            <p className="muted" data-testid="no-usage">
              No usage in the last {DAYS} days. Record usage with an API key (see the API keys page) and it shows here.
            </p>
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

      <div className="columns">
        <TopList title="Top tools" summary={tools} load={daily} empty="No tool calls yet" testId="top-tools" />
        <TopList title="Top end users" summary={users.data} load={users} empty="No end users yet (stdio mode has none)" testId="top-users" />
      </div>
      <p>
        <Link href="/usage">Explore every call →</Link>
      </p>
    </>
  );
}

function Card({ title, value, note, testId }: { title: string; value: string; note: string; testId: string }) {
  return (
    <div className="card" data-testid={`card-${testId}`}>
      <h2>{title}</h2>
      <p className="value">{value}</p>
      <p className="muted small">{note}</p>
    </div>
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
