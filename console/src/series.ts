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
