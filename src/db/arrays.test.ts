import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { testDatabase } from '../../test/harness.js';
import { pgArray } from './arrays.js';
import type { Database } from './client.js';

/**
 * The batch statements' array literals (db/arrays.ts) must mean exactly the JS values they were made
 * from, whatever the text holds: the database parses each one back and answers it element by element.
 */
let db: Database;
beforeAll(async () => {
  db = await testDatabase();
});

const RUNS = 150;
// PostgreSQL text cannot hold NUL; every other code point can, and must come back as it went.
const text = fc.string({ unit: 'binary', maxLength: 40 }).filter((s) => !s.includes('\u0000'));
const tricky = fc.constantFrom('', 'NULL', 'null', ' ', ' a ', '{}', '{a,b}', '"', '\\', '\\"', ',', 'a,b', '{"x":"y\\"z"}', 'é', '😀');

async function roundTrip(sqlType: string, values: unknown[]): Promise<unknown[]> {
  const [row] = await db.query<{ a: unknown[] }>(`SELECT $1::${sqlType}[] AS a`, [pgArray(values as never)]);
  return row!.a;
}

describe('pgArray', () => {
  it('text (with NULLs, quotes, backslashes, braces, the word NULL, any code point) comes back as it went', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.option(fc.oneof(text, tricky), { nil: null }), { maxLength: 20 }), async (values) => {
        expect(await roundTrip('text', values)).toEqual(values);
      }),
      { numRuns: RUNS },
    );
  });

  it('bigints, booleans, uuids and instants come back as they went', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.option(fc.maxSafeInteger(), { nil: null }), { maxLength: 20 }),
        fc.array(fc.option(fc.boolean(), { nil: null }), { maxLength: 20 }),
        fc.array(fc.option(fc.uuid(), { nil: null }), { maxLength: 20 }),
        // Runs of equal instants (distinct Date objects), as a batch's columns hold, with others and NULLs between.
        fc.array(
          fc.option(
            fc.oneof(
              fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true }),
              fc.constantFrom(0, 1, 1_795_000_000_000, 1_795_000_000_001).map((ms) => new Date(ms)),
            ),
            { nil: null },
          ),
          { maxLength: 20 },
        ),
        async (ints, bools, uuids, dates) => {
          // node-postgres answers a bigint[] as strings.
          expect(((await roundTrip('bigint', ints)) as Array<string | number | null>).map((v) => (v === null ? null : Number(v)))).toEqual(ints);
          expect(await roundTrip('boolean', bools)).toEqual(bools);
          expect(await roundTrip('uuid', uuids)).toEqual(uuids);
          expect(((await roundTrip('timestamptz', dates)) as Array<Date | null>).map((d) => d?.getTime() ?? null)).toEqual(
            dates.map((d) => d?.getTime() ?? null),
          );
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('JSON text read as jsonb keeps its value', async () => {
    const docs = [{ a: 'x"y\\z', b: [1, null, '}{'] }, null, { success: true, error: null }];
    const [row] = await db.query<{ a: unknown[] }>('SELECT array_agg(x::jsonb) AS a FROM unnest($1::text[]) AS x', [
      pgArray(docs.map((d) => (d === null ? null : JSON.stringify(d)))),
    ]);
    expect(row!.a).toEqual(docs);
  });

  it('refuses a number that has no literal', () => {
    expect(() => pgArray([1, Number.NaN])).toThrow(TypeError);
    expect(() => pgArray([Number.POSITIVE_INFINITY])).toThrow(TypeError);
  });
});
