/**
 * The one clock. Every period, window, expiry and timestamp written by the service reads it,
 * so tests can move time instead of sleeping.
 */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests can set and advance. */
export class ManualClock implements Clock {
  private current: number;
  constructor(start: Date | string | number = Date.now()) {
    this.current = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.current);
  }
  set(to: Date | string | number): void {
    this.current = new Date(to).getTime();
  }
  advance(ms: number): void {
    this.current += ms;
  }
}

export const SECOND = 1000;
export const MINUTE = 60 * SECOND;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

/**
 * The monthly anniversary of `anchor` that starts the period containing `at`.
 * A day that does not exist in a month (the 31st in April) clamps to the month's last day,
 * as Stripe does for billing cycle anchors.
 */
export function monthlyPeriod(anchor: Date, at: Date): { start: Date; end: Date } {
  let months =
    (at.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (at.getUTCMonth() - anchor.getUTCMonth());
  if (months < 0) months = 0;
  let start = addMonths(anchor, months);
  while (start.getTime() > at.getTime() && months > 0) {
    months -= 1;
    start = addMonths(anchor, months);
  }
  let end = addMonths(anchor, months + 1);
  while (end.getTime() <= at.getTime()) {
    months += 1;
    start = end;
    end = addMonths(anchor, months + 1);
  }
  return { start, end };
}

export function addMonths(anchor: Date, months: number): Date {
  const year = anchor.getUTCFullYear();
  const month = anchor.getUTCMonth() + months;
  const targetYear = year + Math.floor(month / 12);
  const targetMonth = ((month % 12) + 12) % 12;
  const lastDay = new Date(Date.UTC(targetYear, targetMonth + 1, 0)).getUTCDate();
  const day = Math.min(anchor.getUTCDate(), lastDay);
  return new Date(
    Date.UTC(
      targetYear,
      targetMonth,
      day,
      anchor.getUTCHours(),
      anchor.getUTCMinutes(),
      anchor.getUTCSeconds(),
      anchor.getUTCMilliseconds(),
    ),
  );
}
