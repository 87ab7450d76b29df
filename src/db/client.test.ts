import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { dbKind, testDatabase, unique } from '../../test/harness.js';
import { type Database, openDatabase } from './client.js';
import { testPgOptions } from '../../test/pg-options.js';

/**
 * Transactions whose statements travel together (docs/adr/0004-group-commit.md, "Round trips"): BEGIN
 * with the first statement, a pipeline of statements in one round trip, the last statement with its
 * COMMIT. What must hold is what a transaction of one statement per round trip guaranteed.
 *
 * On PostgreSQL these run on a pool of one connection, so every transaction reuses the connection the
 * previous one left: a transaction that ended badly would show in the next.
 */
let db: Database;
let table: string;
beforeAll(async () => {
  db = dbKind === 'postgres' ? await openDatabase({ databaseUrl: inject('postgresUrl'), dataDir: '', poolSize: 1, ...testPgOptions }) : await testDatabase();
  table = unique('tx_test').replace(/-/g, '_');
  await db.query(`CREATE TABLE ${table} (id int PRIMARY KEY, note text)`);
  // Refuses a note of 'refused at commit' when the transaction commits, not when the row is written.
  await db.query(`CREATE FUNCTION ${table}_check() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.note = 'refused at commit' THEN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23514'; END IF;
      RETURN NULL;
    END $$`);
  await db.query(`CREATE CONSTRAINT TRIGGER ${table}_check AFTER INSERT ON ${table} DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ${table}_check()`);
});
afterAll(async () => {
  await db.query(`DROP TABLE ${table}`);
  await db.query(`DROP FUNCTION ${table}_check()`);
  if (dbKind === 'postgres') await db.close();
});

const ids = async () => (await db.query<{ id: number }>(`SELECT id FROM ${table} ORDER BY id`)).map((r) => r.id);
const clear = () => db.query(`DELETE FROM ${table}`);

describe('Transaction.pipeline', () => {
  it('runs its statements in order, each seeing the ones before, and answers each one\'s rows', async () => {
    await clear();
    const [inserted, counted, updated] = await db.transaction((tx) =>
      tx.pipeline([
        { text: `INSERT INTO ${table} (id, note) SELECT unnest($1::int[]), 'a' RETURNING id`, params: ['{1,2,3}'] },
        { text: `SELECT count(*)::int AS n FROM ${table}` },
        { text: `UPDATE ${table} SET note = $1 WHERE id = $2 RETURNING note`, params: ['b', 2], name: `${table}_update` },
      ]),
    );
    expect(inserted!.map((r) => r.id)).toEqual([1, 2, 3]);
    expect(counted).toEqual([{ n: 3 }]);
    expect(updated).toEqual([{ note: 'b' }]);
    expect(await ids()).toEqual([1, 2, 3]);
  });

  it('a failing statement rejects with its own error, and nothing of the transaction stays', async () => {
    await clear();
    const failed = db.transaction(async (tx) => {
      await tx.query(`INSERT INTO ${table} (id) VALUES (1)`);
      return tx.pipeline([
        { text: `INSERT INTO ${table} (id) VALUES (2)` },
        { text: `INSERT INTO ${table} (id) VALUES (1)` },
        { text: `INSERT INTO ${table} (id) VALUES (3)` },
      ]);
    });
    // The duplicate key, not the "transaction is aborted" of the statement after it.
    await expect(failed).rejects.toMatchObject({ code: '23505' });
    expect(await ids()).toEqual([]);
    // The connection came back clean: the next transaction commits.
    await db.transaction((tx) => tx.query(`INSERT INTO ${table} (id) VALUES (4)`));
    expect(await ids()).toEqual([4]);
  });
});

describe('Transaction.queryAndCommit', () => {
  it('commits with its statement; nothing runs in the transaction after it', async () => {
    await clear();
    let late: unknown;
    const out = await db.transaction(async (tx) => {
      await tx.query(`INSERT INTO ${table} (id) VALUES (1)`);
      const rows = await tx.queryAndCommit<{ id: number }>(`INSERT INTO ${table} (id) VALUES (2) RETURNING id`);
      late = await tx.query(`INSERT INTO ${table} (id) VALUES (3)`).catch((err: unknown) => err);
      return rows;
    });
    expect(out).toEqual([{ id: 2 }]);
    expect(late).toBeInstanceOf(Error);
    expect(await ids()).toEqual([1, 2]);
  });

  it('a statement that fails rejects with its error and commits nothing', async () => {
    await clear();
    await db.query(`INSERT INTO ${table} (id) VALUES (1)`);
    const failed = db.transaction(async (tx) => {
      await tx.query(`INSERT INTO ${table} (id) VALUES (2)`);
      return tx.queryAndCommit(`INSERT INTO ${table} (id) VALUES (1)`);
    });
    await expect(failed).rejects.toMatchObject({ code: '23505' });
    expect(await ids()).toEqual([1]);
    await db.transaction((tx) => tx.queryAndCommit(`INSERT INTO ${table} (id) VALUES (5)`));
    expect(await ids()).toEqual([1, 5]);
  });

  it('a COMMIT that fails rejects with its error (a SQLSTATE: nothing committed)', async () => {
    await clear();
    const failed = db.transaction(async (tx) => {
      await tx.query(`INSERT INTO ${table} (id) VALUES (1)`);
      // Written without error; the deferred check refuses it at COMMIT.
      return tx.queryAndCommit(`INSERT INTO ${table} (id, note) VALUES (2, 'refused at commit')`);
    });
    await expect(failed).rejects.toMatchObject({ code: '23514' });
    expect(await ids()).toEqual([]);
    await db.transaction((tx) => tx.query(`INSERT INTO ${table} (id) VALUES (6)`));
    expect(await ids()).toEqual([6]);
  });
});

describe('a transaction without statements', () => {
  it('answers fn\'s value and leaves the connection clean', async () => {
    await clear();
    expect(await db.transaction(async () => 42)).toBe(42);
    await db.transaction((tx) => tx.query(`INSERT INTO ${table} (id) VALUES (7)`));
    expect(await ids()).toEqual([7]);
  });
});

describe.runIf(dbKind === 'postgres')('named prepared statements (DATABASE_PREPARED_STATEMENTS)', () => {
  // Inside one transaction: through a pooler in transaction mode (scripts/test-pgbouncer.ts) that is
  // the one server connection these statements are sure to share.
  const prepared = async (preparedStatements: boolean) => {
    const own = await openDatabase({ databaseUrl: inject('postgresUrl'), dataDir: '', poolSize: 1, preparedStatements });
    const name = `${unique('stmt').replace(/-/g, '_')}`;
    try {
      return await own.transaction(async (tx) => {
        const [answer] = await tx.query<{ n: number }>('SELECT $1::int + 1 AS n', [41], name);
        const [piped] = await tx.pipeline([{ text: 'SELECT $1::int + 2 AS n', params: [40], name: `${name}_p` }]);
        const names = await tx.query<{ name: string }>('SELECT name FROM pg_prepared_statements WHERE name LIKE $1', [`${name}%`]);
        return { answers: [answer!.n, (piped![0] as { n: number }).n], names: names.map((r) => r.name).sort() };
      });
    } finally {
      await own.close();
    }
  };

  it('by default each named statement is prepared once on its connection', async () => {
    const seen = await prepared(true);
    expect(seen.answers).toEqual([42, 42]);
    expect(seen.names).toHaveLength(2);
  });

  it('turned off, no statement is prepared by name, and the answers are the same', async () => {
    const seen = await prepared(false);
    expect(seen.answers).toEqual([42, 42]);
    expect(seen.names).toEqual([]);
  });
});
