import parsePrometheusTextFormat, { type PromFamily, type PromSample } from 'parse-prometheus-text-format';
import { expect } from 'vitest';
import { adminHeaders, type Harness } from './harness.js';

/** A parsed GET /metrics, with readers that treat a missing series as 0. */
export interface Scrape {
  text: string;
  families: PromFamily[];
  family(name: string): PromFamily | undefined;
  /** The sample of a counter or gauge whose labels include `labels`; 0 when there is none. */
  value(name: string, labels?: Record<string, string>): number;
  /** A histogram's observation count and sum for the series whose labels include `labels`. */
  histogram(name: string, labels?: Record<string, string>): { count: number; sum: number };
}

const matches = (s: PromSample, labels: Record<string, string>) =>
  Object.entries(labels).every(([k, v]) => s.labels?.[k] === v);

export function parseScrape(text: string): Scrape {
  const families = parsePrometheusTextFormat(text);
  // The parser folds every series of a histogram into one and drops the labels of its _count and _sum
  // (it only knows label-less histograms): read those from a second parse in which histograms are
  // untyped, so each of x_bucket, x_count and x_sum is a family of its own with its labels.
  const flat = parsePrometheusTextFormat(text.replace(/^# TYPE \S+ histogram$/gm, ''));
  const family = (name: string) => families.find((f) => f.name === name);
  // Untyped, a name comes back as one family per run of lines (x_bucket, x_sum, x_count per series): all of them count.
  const sum = (from: PromFamily[], name: string, labels: Record<string, string>) =>
    from
      .filter((f) => f.name === name)
      .flatMap((f) => f.metrics)
      .filter((s) => matches(s, labels))
      .reduce((n, s) => n + Number(s.value), 0);
  return {
    text,
    families,
    family,
    value: (name, labels = {}) => sum(families, name, labels),
    histogram: (name, labels = {}) => ({ count: sum(flat, `${name}_count`, labels), sum: sum(flat, `${name}_sum`, labels) }),
  };
}

/** GET /metrics with `headers` (the operator key unless given); fails the test unless 200. */
/** How much a counter or gauge moved between two scrapes, for the series whose labels include `labels`. */
export const delta = (before: Scrape, after: Scrape, name: string, labels?: Record<string, string>): number =>
  after.value(name, labels) - before.value(name, labels);

export async function scrape(h: Harness, headers: Record<string, string> = adminHeaders(h)): Promise<Scrape> {
  const res = await h.request({ method: 'GET', url: '/metrics', headers });
  expect(res.statusCode, res.body).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseScrape(res.body);
}
