import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * ADR 0003 (docs/adr/0003-credits-owns-money.md): only src/modules/credits/ writes the money tables.
 * A statement that inserts into, updates or deletes from one of them anywhere else fails this test.
 */
const MONEY_TABLES = [
  'credit_balances',
  'credit_ledger',
  'usage_records',
  'usage_refunds',
  'invocations',
  'credit_grants',
  'credit_purchases',
  'ai_reservations',
  'meter_event_outbox',
  'budget_windows',
  'auto_top_ups',
];
const WRITE = new RegExp(`\\b(INSERT\\s+INTO|UPDATE|DELETE\\s+FROM)\\s+(${MONEY_TABLES.join('|')})\\b`, 'i');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

describe('one owner of the money tables', () => {
  it('no module but credits writes credit_balances, credit_ledger, usage_records, invocations and the rest', () => {
    const root = join(import.meta.dirname, '..', 'src');
    const offenders: string[] = [];
    for (const file of sources(root)) {
      const rel = relative(root, file);
      if (rel.startsWith(join('modules', 'credits'))) continue;
      const text = readFileSync(file, 'utf8');
      for (const [i, line] of text.split('\n').entries()) if (WRITE.test(line)) offenders.push(`${rel}:${i + 1}: ${line.trim()}`);
    }
    expect(offenders).toEqual([]);
  });

  it('the check would see a writer (it matches the statements the credits module uses)', () => {
    const credits = sources(join(import.meta.dirname, '..', 'src', 'modules', 'credits')).map((f) => readFileSync(f, 'utf8'));
    expect(credits.some((t) => WRITE.test(t))).toBe(true);
    expect(WRITE.test('UPDATE credit_balances b SET reserved = 0')).toBe(true);
    expect(WRITE.test('INSERT INTO usage_records (id) VALUES ($1)')).toBe(true);
  });
});

/**
 * One entry point (docs/adr/0006-one-money-engine.md): outside src/modules/credits/, source files import
 * credits only through credits/index.ts, so callers use its verbs and never build the engine's batches
 * or choose its paths.
 */
const CREDITS_IMPORT = /(?:from\s+|import\s*\(\s*)'((?:\.\.?\/)+(?:modules\/)?credits\/[^']+)'/g;

describe('one entry point to credits', () => {
  const root = join(import.meta.dirname, '..', 'src');
  const imports = () =>
    sources(root).flatMap((file) => {
      const rel = relative(root, file);
      if (rel.startsWith(join('modules', 'credits'))) return [];
      return [...readFileSync(file, 'utf8').matchAll(CREDITS_IMPORT)].map((m) => ({ rel, target: m[1]! }));
    });

  it('no source file outside credits imports anything of credits but its index', () => {
    const offenders = imports()
      .filter(({ target }) => !target.endsWith('/credits/index.js'))
      .map(({ rel, target }) => `${rel} -> ${target}`);
    expect(offenders).toEqual([]);
  });

  it('the scan sees the imports of credits (a rule that finds nothing proves nothing)', () => {
    expect(imports().length).toBeGreaterThan(10);
  });
});

