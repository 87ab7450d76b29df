/**
 * Options for the tests' own PostgreSQL connections: named prepared statements, unless the run goes
 * through a pooler that cannot keep them (scripts/test-pgbouncer.ts sets CG_TEST_PREPARED_STATEMENTS=false;
 * docs/operations.md, "PgBouncer").
 */
export const testPgOptions = { preparedStatements: process.env.CG_TEST_PREPARED_STATEMENTS !== 'false' } as const;
