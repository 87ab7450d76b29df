import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BudgetCounter, type BudgetWindowKind, windowOf } from './budget-rules.js';
import type { BudgetWithPeriod } from './budgets.js';
import { RowMemory, type Written } from './engine/remembered.js';
import type { BalanceRow } from './service.js';
import type { BatchDeduction } from './engine/types.js';

/**
 * The budget windows' pure parts (docs/budgets.md, Windows; "Batches on remembered rows"): windowOf
 * gives the window it made last again while it holds the instant asked, and an instance's memory of
 * window rows answers only the window asked for.
 */

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The window of `kind` holding `t`, worked out from the calendar with nothing kept. */
function expected(kind: Exclude<BudgetWindowKind, 'period'>, t: number): { start: number; end: number } {
  const d = new Date(t);
  switch (kind) {
    case 'hour': {
      const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours());
      return { start, end: start + HOUR };
    }
    case 'day': {
      const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
      return { start, end: start + DAY };
    }
    case 'week': {
      // getUTCDay: 0 is Sunday; the week starts on Monday.
      const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - ((d.getUTCDay() + 6) % 7));
      return { start, end: start + 7 * DAY };
    }
    case 'month':
      return { start: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) };
  }
}

describe('windowOf', () => {
  it('answers the calendar window of every instant, in any order of asking, the instants near boundaries too', () => {
    // Instants within a few milliseconds of hour boundaries, and anywhere from 1990 to 2100.
    const nearBoundary = fc
      .tuple(fc.integer({ min: 175_000, max: 1_140_000 }), fc.integer({ min: -3, max: 3 }))
      .map(([hours, ms]) => hours * HOUR + ms);
    const anywhere = fc.integer({ min: Date.UTC(1990, 0, 1), max: Date.UTC(2100, 0, 1) });
    const kinds = fc.constantFrom<Exclude<BudgetWindowKind, 'period'>>('hour', 'day', 'week', 'month');
    fc.assert(
      fc.property(fc.array(fc.tuple(kinds, fc.oneof(nearBoundary, anywhere)), { minLength: 1, maxLength: 40 }), (asks) => {
        for (const [kind, t] of asks) {
          const got = windowOf(kind, new Date(t), null);
          expect({ start: got.start.getTime(), end: got.end.getTime() }).toEqual(expected(kind, t));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('gives the same window object to instants it holds, and a new one past its end', () => {
    const at = Date.UTC(2026, 10, 28, 9, 15);
    const first = windowOf('hour', new Date(at), null);
    expect(windowOf('hour', new Date(at + 20 * 60_000), null)).toBe(first);
    const next = windowOf('hour', new Date(first.end.getTime()), null);
    expect(next.start.getTime()).toBe(first.end.getTime());
    expect(windowOf('hour', new Date(first.end.getTime() - 1), null).start.getTime()).toBe(first.start.getTime());
  });

  it('answers the credit period given for a period window', () => {
    const period = { start: new Date(Date.UTC(2026, 10, 3)), end: new Date(Date.UTC(2026, 11, 3)) };
    expect(windowOf('period', new Date(Date.UTC(2026, 10, 20)), period)).toBe(period);
    expect(() => windowOf('period', new Date(), null)).toThrow();
  });
});

describe('RowMemory: remembered budget windows', () => {
  const deploymentId = '00000000-0000-4000-8000-000000000001';
  const budget = { id: '00000000-0000-4000-8000-0000000000b1', mode: 'block', limit_credits: 100 } as BudgetWithPeriod;
  const hourAt = (h: number) => new Date(Date.UTC(2026, 10, 28, h));
  const row = { deployment_id: deploymentId, organization_id: 'o', reserved: 0, sync_before: new Date(Date.UTC(2027, 0, 1)) } as BalanceRow;
  const item = (now: Date) => ({ deploymentId, now, releaseReserved: 0, invocationId: null }) as unknown as BatchDeduction;
  const counter = (id: string, subject: string, hour: number, spent: number): BudgetCounter => ({
    id,
    budgetId: budget.id,
    subject,
    window: windowOf('hour', hourAt(hour), null),
    limitCredits: 100,
    block: true,
    spentCredits: spent,
  });
  const written = (now: Date, counters: BudgetCounter[], version: string): Written => ({
    versions: [{ id: deploymentId, version: `row-${version}`, row, budgets: [budget] }],
    windows: { counters, version },
    now,
  });

  it('answers a window only for the budget, subject and start it was counted in, as the last batch left it', () => {
    const memory = new RowMemory(60_000);
    const at = new Date(hourAt(9).getTime() + 60_000);
    memory.remember(written(at, [counter('w-a', 'tool-a', 9, 5), counter('w-b', 'tool-b', 9, 7)], '100'), []);
    const plan = memory.plan([item(at)])!;
    expect(plan.window(budget.id, 'tool-a', hourAt(9))).toMatchObject({ id: 'w-a', spentCredits: 5, version: '100' });
    expect(plan.window(budget.id, 'tool-b', hourAt(9))).toMatchObject({ id: 'w-b', spentCredits: 7 });
    expect(plan.window(budget.id, 'tool-c', hourAt(9))).toBeUndefined();
    expect(plan.window(budget.id, 'tool-a', hourAt(10))).toBeUndefined();
    expect(plan.window('another budget', 'tool-a', hourAt(9))).toBeUndefined();

    // The next batch's count replaces it; the next hour's window replaces the last hour's.
    memory.remember(written(at, [counter('w-a', 'tool-a', 9, 12)], '101'), []);
    expect(memory.plan([item(at)])!.window(budget.id, 'tool-a', hourAt(9))).toMatchObject({ spentCredits: 12, version: '101' });
    const later = new Date(hourAt(10).getTime() + 1_000);
    memory.remember(written(later, [counter('w-a2', 'tool-a', 10, 1)], '102'), []);
    const next = memory.plan([item(later)])!;
    expect(next.window(budget.id, 'tool-a', hourAt(10))).toMatchObject({ id: 'w-a2', spentCredits: 1, version: '102' });
    expect(next.window(budget.id, 'tool-a', hourAt(9))).toBeUndefined();

    // An older window counted afterwards (a hold given back) does not take the newer one's place.
    memory.remember(written(later, [counter('w-a', 'tool-a', 9, 0)], '103'), []);
    expect(memory.plan([item(later)])!.window(budget.id, 'tool-a', hourAt(10))).toMatchObject({ id: 'w-a2', version: '102' });
  });

  it('forgets the windows of a batch that something after its writes may have changed, and windows older than rememberMs', () => {
    const memory = new RowMemory(60_000);
    const at = new Date(hourAt(9).getTime() + 60_000);
    memory.remember(written(at, [counter('w-a', 'tool-a', 9, 5)], '100'), []);
    memory.remember(written(at, [counter('w-a', 'tool-a', 9, 6)], '101'), ['some other deployment']);
    memory.remember({ versions: [{ id: deploymentId, version: 'row-102', row, budgets: [budget] }], windows: null, now: at }, []);
    expect(memory.plan([item(at)])!.window(budget.id, 'tool-a', hourAt(9))).toBeUndefined();

    memory.remember(written(at, [counter('w-a', 'tool-a', 9, 7)], '104'), []);
    const soon = new Date(at.getTime() + 30_000);
    memory.remember({ versions: [{ id: deploymentId, version: 'row-105', row, budgets: [budget] }], windows: null, now: soon }, []);
    expect(memory.plan([item(soon)])!.window(budget.id, 'tool-a', hourAt(9))).toMatchObject({ spentCredits: 7 });
    const late = new Date(at.getTime() + 60_001);
    memory.remember({ versions: [{ id: deploymentId, version: 'row-106', row, budgets: [budget] }], windows: null, now: late }, []);
    expect(memory.plan([item(late)])!.window(budget.id, 'tool-a', hourAt(9))).toBeUndefined();
  });
});
