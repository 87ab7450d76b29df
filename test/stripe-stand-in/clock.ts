import { randomBytes } from 'node:crypto';

/** The stand-in's time: the caller's `now()` plus whatever `advance()` added (for standalone use). */
export interface Clock {
  now(): Date;
  /** Unix seconds, as every Stripe timestamp. */
  seconds(): number;
  advance(seconds: number): Date;
}

export function createClock(source: () => Date = () => new Date()): Clock {
  let offsetMs = 0;
  const now = () => new Date(source().getTime() + offsetMs);
  return {
    now,
    seconds: () => Math.floor(now().getTime() / 1000),
    advance(seconds) {
      offsetMs += seconds * 1000;
      return now();
    },
  };
}

export type Interval = 'month' | 'year';

/**
 * The end of the `n`th period after `anchor` (unix seconds), as Stripe bills: months are calendar months,
 * a day past the month's end clamps to its last day, and each period counts from the anchor, so a
 * subscription started on Jan 31 renews on Feb 28, then Mar 31.
 */
export function periodEnd(anchor: number, interval: Interval, n: number): number {
  const start = new Date(anchor * 1000);
  const months = (interval === 'year' ? 12 : 1) * n;
  const firstOfTarget = new Date(
    Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + months, 1, start.getUTCHours(), start.getUTCMinutes(), start.getUTCSeconds()),
  );
  const lastDay = new Date(Date.UTC(firstOfTarget.getUTCFullYear(), firstOfTarget.getUTCMonth() + 1, 0)).getUTCDate();
  firstOfTarget.setUTCDate(Math.min(start.getUTCDate(), lastDay));
  return Math.floor(firstOfTarget.getTime() / 1000);
}

/** The first period boundary after `after`, counting from `anchor`. */
export function nextPeriodEnd(anchor: number, interval: Interval, after: number): number {
  let n = 1;
  while (periodEnd(anchor, interval, n) <= after) n++;
  return periodEnd(anchor, interval, n);
}

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Letters and digits, like the tail of a Stripe id. */
export function randomToken(length: number): string {
  return [...randomBytes(length)].map((byte) => ALPHABET[byte % ALPHABET.length]).join('');
}

/** A Stripe-looking id: `newId('cus_')` → `cus_Q3x…` (24 characters after the prefix). */
export function newId(prefix: string): string {
  return `${prefix}${randomToken(24)}`;
}
