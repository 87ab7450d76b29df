import { api } from '../api';
import { ApiError } from '../api-errors';
import type { Schemas } from '../types';
import { fmtDay, fmtInt, Loading, LoadError, useLoad } from '../ui';
import './extra.css';

export type BalanceHistoryAnswer = Schemas['BalanceHistory'];

const WIDTH = 240;
const HEIGHT = 48;

/** The closing balances as an SVG polyline's points (null days, unlimited, are left out). */
function sparkPoints(values: Array<number | null>): string {
  const known = values.filter((v): v is number => v !== null);
  if (known.length === 0) return '';
  const min = Math.min(...known);
  const span = Math.max(...known) - min || 1;
  const step = values.length > 1 ? WIDTH / (values.length - 1) : 0;
  return values
    .map((v, i) => (v === null ? null : `${(i * step).toFixed(1)},${(HEIGHT - 2 - ((v - min) / span) * (HEIGHT - 4)).toFixed(1)}`))
    .filter((p) => p !== null)
    .join(' ');
}

/** The date of `iso` in `tz`, for "credits last until". */
function dayIn(iso: string, tz: string): string {
  try {
    return new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(new Date(iso));
  } catch {
    return fmtDay(iso);
  }
}

/**
 * The overview's balance card (docs/usage-analytics.md, "Balance history"): the closing balance per day
 * as a sparkline, the burn rate and when the credits run out at that rate. Days of `tz`; a zone the
 * service cannot bucket by (a half-hour offset) falls back to UTC, as the per-day chart does.
 */
export function BalanceHistory({ orgId, from, to, tz }: { orgId: string; from?: string; to?: string; tz?: string }) {
  const history = useLoad(async () => {
    const read = (zone?: string) =>
      api.GET('/organizations/{id}/balance/history', { params: { path: { id: orgId }, query: { from, to, tz: zone } } });
    if (!tz || tz === 'UTC') return read();
    try {
      return await read(tz);
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) return read();
      throw err;
    }
  }, [orgId, from, to, tz]);
  const h = history.data;
  return (
    <section className="balance-history" aria-labelledby="balance-history" data-testid="balance-history">
      <h2 id="balance-history">Balance</h2>
      <LoadError error={history.error} retry={history.reload} what="the balance history" busy={history.loading} />
      {h ? (
        <div className="card balance-history-card">
          <svg
            className="sparkline"
            viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
            preserveAspectRatio="none"
            role="img"
            aria-label={`Closing balance per day, ${h.days.length} days (${h.tz})`}
          >
            <polyline points={sparkPoints(h.days.map((d) => d.balance))} />
          </svg>
          <p className="balance-history-now">
            <strong data-testid="balance-now">{fmtInt(h.balance)}</strong> credits now
          </p>
          <p className="muted small" data-testid="burn-rate">
            Burn rate: {h.burn_rate.toLocaleString('en-US', { maximumFractionDigits: 1 })} credits a day (last 7 days)
          </p>
          <p className="small" data-testid="runs-out">
            {h.balance === null
              ? 'Unlimited monthly credits.'
              : h.runs_out_at
                ? `At this rate, credits last until ${dayIn(h.runs_out_at, h.tz)}.`
                : 'No spending in the last 7 days.'}
          </p>
        </div>
      ) : history.loading ? (
        <Loading what="the balance history" shape="cards" rows={1} />
      ) : null}
    </section>
  );
}
