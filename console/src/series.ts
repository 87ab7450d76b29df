/**
 * The overview's data shaping, kept apart from React so it is unit-tested (series.unit.test.ts): the
 * stacked chart's series and the top tools, both from one split usage summary
 * (docs/usage-analytics.md "Split buckets").
 */
import type { StackSeries } from './chart';
import type { Schemas } from './types';

export type UsageCounts = Schemas['UsageTotals'];

export type UsageGroup = Schemas['UsageGroup'];

export type UsageSummary = Schemas['UsageSummary'];

/**
 * The credits of each day of the range, one series per split key (the largest ten, in split_keys
 * order) and one "all others" last when there is one. Series are told apart by their part, not their label:
 * a tool named "other" or "(none)" stays its own series.
 */
export function stackOf(summary: UsageSummary): { times: number[]; series: StackSeries[] } {
  const times = summary.groups.map((g) => Date.parse(g.key ?? '') / 1000);
  const byKey = new Map<string | null, StackSeries>();
  const series: StackSeries[] = [];
  const add = (name: string) => {
    const s: StackSeries = { name, values: summary.groups.map(() => 0) };
    series.push(s);
    return s;
  };
  for (const key of summary.split_keys ?? []) byKey.set(key, add(key ?? '(none)'));
  const other: StackSeries = { name: 'all others', values: summary.groups.map(() => 0) };
  summary.groups.forEach((g, day) => {
    for (const part of g.split ?? []) {
      const target = part.other ? other : byKey.get(part.key);
      if (target) target.values[day] = part.credits;
    }
  });
  if (summary.groups.some((g) => g.split?.some((part) => part.other))) series.push(other);
  return { times, series };
}

/** The split keys of a split summary with their counts over the whole range: the largest tools, largest first. */
export function topOf(summary: UsageSummary): UsageSummary {
  const totals = new Map<string | null, UsageGroup>((summary.split_keys ?? []).map((key) => [key, { key, calls: 0, successful: 0, failed: 0, credits: 0, credits_refunded: 0, input_tokens: 0, output_tokens: 0 }]));
  for (const group of summary.groups) {
    for (const part of group.split ?? []) {
      const t = part.other ? undefined : totals.get(part.key);
      if (!t) continue;
      t.calls += part.calls;
      t.successful += part.successful;
      t.failed += part.failed;
      t.credits += part.credits;
      t.credits_refunded += part.credits_refunded;
      t.input_tokens += part.input_tokens;
      t.output_tokens += part.output_tokens;
    }
  }
  return { ...summary, groups: [...totals.values()] };
}

/** The browser's IANA zone, for day buckets in the user's own days (docs/usage-analytics.md, "Time zones"). */
export function browserZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** A day bucket's label, YYYY-MM-DD, in the zone its summary was asked in (a bucket starts at that zone's midnight). */
export function dayLabel(seconds: number, tz: string): string {
  const at = new Date(seconds * 1000);
  try {
    return new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(at);
  } catch {
    return at.toISOString().slice(0, 10);
  }
}

const grouped = new Intl.NumberFormat('en-US');
const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

/** A count with thousands separators: 12,345. */
export const fmtNumber = (n: number): string => grouped.format(n);

/** A count for an axis or a legend: whole below 10,000, compact above (12.3K, 4.5M). */
export const fmtCompact = (n: number): string => (Math.abs(n) >= 10_000 ? compact.format(n) : grouped.format(n));

/** The overview's range: the last 7, 30 or 90 days, or two days chosen (both included). */
export type RangeChoice = { days: 7 | 30 | 90 } | { from: string; to: string };

export const PRESET_DAYS = [7, 30, 90] as const;

const ISO_DAY = /^\d{4}-\d{2}-\d{2}$/;

/** The range a query string names (`range=7d`, or `from=YYYY-MM-DD&to=YYYY-MM-DD`); 30 days otherwise. */
export function parseRange(search: string): RangeChoice {
  const q = new URLSearchParams(search);
  const from = q.get('from') ?? '';
  const to = q.get('to') ?? '';
  if (ISO_DAY.test(from) && ISO_DAY.test(to) && !Number.isNaN(Date.parse(from)) && !Number.isNaN(Date.parse(to)) && from <= to) return { from, to };
  const days = Number(/^(\d+)d$/.exec(q.get('range') ?? '')?.[1]);
  return { days: (PRESET_DAYS as readonly number[]).includes(days) ? (days as 7 | 30 | 90) : 30 };
}

/** The query string that names a range, for the address bar (a reload keeps it). */
export function rangeSearch(choice: RangeChoice): string {
  return 'days' in choice ? `range=${choice.days}d` : `from=${choice.from}&to=${choice.to}`;
}

/** The UTC offset of `tz` at an instant, in milliseconds (positive east of Greenwich). */
function offsetAt(ms: number, tz: string): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: tz,
    hourCycle: 'h23',
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    second: 'numeric',
  }).formatToParts(new Date(ms));
  const n = (type: string) => Number(parts.find((p) => p.type === type)?.value ?? 0);
  return Date.UTC(n('year'), n('month') - 1, n('day'), n('hour'), n('minute'), n('second')) - Math.floor(ms / 1000) * 1000;
}

/** The instant a day (YYYY-MM-DD, `shift` days later) starts in `tz`: its local midnight. */
export function zoneMidnight(day: string, tz: string, shift = 0): Date {
  const [y, m, d] = day.split('-').map(Number) as [number, number, number];
  const local = Date.UTC(y, m - 1, d + shift);
  try {
    let at = local - offsetAt(local, tz);
    at = local - offsetAt(at, tz);
    return new Date(at);
  } catch {
    return new Date(local);
  }
}

/**
 * The summary's `from`/`to` for a range, as instants of the user's zone: a preset starts at the local
 * midnight of the day `days − 1` before today and runs to the service's now (no `to`); chosen days run
 * from the first one's midnight to the midnight after the last (the API's `to` is exclusive).
 */
export function rangeQuery(choice: RangeChoice, tz: string, now: Date): { from: string; to?: string } {
  if ('days' in choice) return { from: zoneMidnight(dayLabel(now.getTime() / 1000, tz), tz, 1 - choice.days).toISOString() };
  return { from: zoneMidnight(choice.from, tz).toISOString(), to: zoneMidnight(choice.to, tz, 1).toISOString() };
}
