import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { expect, inject } from 'vitest';
import { buildApp } from '../src/app.js';
import { ManualClock } from '../src/clock.js';
import { type Config, testConfig } from '../src/config.js';
import { type Ctx, type Deps, systemCtx } from '../src/context.js';
import { type Database, openDatabase } from '../src/db/client.js';
import { testPgOptions } from './pg-options.js';
import { applyMigrations, MIGRATIONS_FOLDER, runMigrations } from '../src/db/migrate.js';
import type { Scope } from '../src/modules/api-keys/service.js';
import { createApiKey } from '../src/modules/api-keys/service.js';
import { startEmailVerification } from '../src/modules/auth/email-verification.js';
import { forgetBalance } from '../src/modules/credits/balance-cache.js';
import { changePurchased } from '../src/modules/credits/service.js';
import { updateDeployment } from '../src/modules/deployments/service.js';
import type { Tier } from '../src/lib/tiers.js';
import { createOrganization } from '../src/modules/organizations/service.js';
import { createUser } from '../src/modules/users/service.js';
import { dispatchPending } from '../src/modules/events/outbox.js';

export type TestDbKind = 'pglite' | 'postgres';
export const dbKind = (process.env.CG_TEST_DB ?? 'pglite') as TestDbKind;

let shared: Promise<Database> | undefined;

/**
 * One database per test worker (PGlite takes seconds and hundreds of MB to start): tests isolate by
 * tenant, never by database. PostgreSQL: the run's fresh database from the global setup.
 */
export function testDatabase(): Promise<Database> {
  shared ??= (async () => {
    if (dbKind === 'postgres') {
      return openDatabase({ databaseUrl: inject('postgresUrl'), dataDir: '', poolSize: 30, ...testPgOptions });
    }
    const db = await openDatabase({ databaseUrl: 'memory://', dataDir: '' });
    await runMigrations(db);
    return db;
  })();
  return shared;
}

export interface Harness {
  app: FastifyInstance;
  deps: Deps;
  clock: ManualClock;
  config: Config;
  /** A context acting as the operator, for fixtures through the service layer. */
  ctx: Ctx;
  request(options: InjectOptions): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

const ownUrls = new WeakMap<Database, string>();

/** The PostgreSQL URL of `db` (an isolatedDatabase's own, else the run's), for a child process that must open the same database. */
export const postgresUrlOf = (db: Database): string => ownUrls.get(db) ?? inject('postgresUrl');

/**
 * A database of its own for a test file that changes what every tenant of the shared one would see
 * (the partitions of usage_records), set up by `migrate` (all migrations by default). PostgreSQL: a new
 * database beside the run's, dropped by close().
 */
export async function isolatedDatabase(migrate: (db: Database) => Promise<void> = runMigrations): Promise<Database> {
  if (dbKind === 'pglite') {
    const db = await openDatabase({ databaseUrl: 'memory://', dataDir: '' });
    await migrate(db);
    return db;
  }
  const url = new URL(inject('postgresUrl'));
  const name = `${url.pathname.slice(1)}_own_${process.pid}_${(counter++).toString(36)}`;
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const adminDb = await openDatabase({ databaseUrl: admin.toString(), dataDir: '', poolSize: 1, ...testPgOptions });
  await adminDb.query(`CREATE DATABASE ${name}`);
  url.pathname = `/${name}`;
  const db = await openDatabase({ databaseUrl: url.toString(), dataDir: '', poolSize: 10, ...testPgOptions });
  ownUrls.set(db, url.toString());
  await migrate(db);
  const close = db.close.bind(db);
  db.close = async () => {
    await close();
    await adminDb.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await adminDb.close();
  };
  return db;
}

/**
 * createHarness for a test file that runs a pass of every tenant's rows (the webhook delivery worker, a job worker) at
 * a clock it moves: on PostgreSQL, a database of its own. On the run's shared database such a pass, minutes
 * or days ahead of other files' clocks, takes their rows in flight (a lease that has run out at its clock
 * has not at theirs), so a delivery a file is sending goes out twice, or a reservation it holds expires.
 * PGlite is one database per vitest worker, whose files run one after another: the shared one. close()
 * also closes the file's own database.
 */
export async function createPassesHarness(overrides: Partial<Config> = {}, start?: string): Promise<Harness> {
  const own = dbKind === 'postgres';
  const db = own ? await isolatedDatabase() : await testDatabase();
  try {
    const h = await createHarness(overrides, start, db);
    return {
      ...h,
      close: async () => {
        try {
          await h.close();
        } finally {
          if (own) await db.close();
        }
      },
    };
  } catch (err) {
    if (own) await db.close();
    throw err;
  }
}

/**
 * A database of its own migrated only up to (not including) the migration whose tag starts with
 * `before` ('0025'), as an installation of an earlier version is: for the tests of an upgrade.
 * close() also removes the copy of the migrations it was made from.
 */
export async function databaseBefore(before: string): Promise<Database> {
  const folder = mkdtempSync(join(tmpdir(), 'cg-migrations-'));
  cpSync(MIGRATIONS_FOLDER, folder, { recursive: true });
  const journalPath = join(folder, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
  journal.entries = journal.entries.filter((e) => e.tag < before);
  writeFileSync(journalPath, JSON.stringify(journal));
  const db = await isolatedDatabase((d) => applyMigrations(d, folder));
  const close = db.close.bind(db);
  db.close = async () => {
    await close();
    rmSync(folder, { recursive: true, force: true });
  };
  return db;
}

export async function createHarness(
  overrides: Partial<Config> = {},
  start = '2026-01-15T12:00:00.000Z',
  own?: Database,
): Promise<Harness> {
  const db = own ?? (await testDatabase());
  const config = testConfig(overrides);
  const clock = new ManualClock(start);
  const app = await buildApp({ config, db, clock });
  await app.ready();
  const deps = app.deps;
  return {
    app,
    deps,
    clock,
    config,
    ctx: { ...systemCtx(deps), actor: { type: 'operator' } },
    request: (options) => app.inject(options),
    close: () => app.close(),
  };
}

let counter = 0;
export const unique = (prefix: string): string =>
  `${prefix}-${process.pid}-${Date.now().toString(36)}-${(counter++).toString(36)}`;

export interface Tenant {
  organizationId: string;
  deploymentId: string;
  deploymentSecret: string;
  userId: string;
  /** An API key with read+write scopes. */
  apiKey: string;
}

/**
 * A fresh organization with its primary deployment at `tier`, an owner and a read+write API key,
 * created through the service layer. `purchased` grants purchased credits on top.
 */
export async function createTenant(
  h: Harness,
  options: { tier?: Tier; purchased?: number; scopes?: Scope[]; externalId?: string } = {},
): Promise<Tenant> {
  const user = await createUser(h.ctx, { email: `${unique('user')}@example.com`, externalId: options.externalId });
  const slug = unique('org').toLowerCase().replace(/[^a-z0-9-]/g, '-');
  const { organization, deployment, deploymentSecret } = await createOrganization(h.ctx, {
    name: `Org ${slug}`,
    slug,
    ownerUserId: user.id,
    tier: options.tier ?? 'launch',
  });
  if (options.purchased) await grant(h, deployment.id, options.purchased);
  const { key } = await createApiKey(h.ctx, {
    organizationId: organization.id,
    name: 'test key',
    scopes: options.scopes ?? ['read', 'write'],
  });
  return { organizationId: organization.id, deploymentId: deployment.id, deploymentSecret, userId: user.id, apiKey: key };
}

/**
 * The statements sent through `db` whose text matches `pattern` (their names, else their text), from
 * now until stop(). The driver still runs every statement.
 */
export function watchStatements(db: Database, pattern: RegExp): { stop: () => string[] } {
  const original = db.query;
  const seen: string[] = [];
  db.query = ((text: string, params?: readonly unknown[], name?: string) => {
    if (pattern.test(text)) seen.push(name ?? text);
    return original.call(db, text, params, name);
  }) as typeof db.query;
  return {
    stop: () => {
      db.query = original;
      return seen;
    },
  };
}

export async function grant(h: Harness, deploymentId: string, amount: number): Promise<void> {
  await h.deps.db.transaction((tx) =>
    changePurchased(tx, { deploymentId, amount, reason: 'test grant', actor: 'operator', now: h.clock.now() }),
  );
  forgetBalance(h.deps, deploymentId, true);
}

export async function setTier(h: Harness, deploymentId: string, tier: Tier): Promise<void> {
  await updateDeployment(h.ctx, deploymentId, { tier });
}

export const json = <T = Record<string, unknown>>(res: LightMyRequestResponse): T => res.json() as T;

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}

export function serviceHeaders(h: Harness): Record<string, string> {
  return { 'x-mcp-service-key': h.config.mcpServiceKey };
}

export function adminHeaders(h: Harness): Record<string, string> {
  return { 'x-admin-key': h.config.adminApiKey };
}

/** A deployment's AI token limit, set by the operator's override. */
export async function setAiLimit(h: Harness, t: Pick<Tenant, 'deploymentId'>, limit: number): Promise<void> {
  const res = await h.request({
    method: 'PUT',
    url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
    headers: adminHeaders(h),
    payload: { ai_tokens_limit: limit },
  });
  expect(res.statusCode, res.body).toBe(200);
}

export interface SignedInUser {
  userId: string;
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
}

/** Sign up a fresh user through the API and verify its address through the real route (docs/accounts.md, Email verification); returns its tokens. */
export async function signUp(h: Harness, fullName = 'Test User'): Promise<SignedInUser> {
  const user = await signUpUnverified(h, fullName);
  await verifyEmailOf(h, user.userId);
  return user;
}

/** Sign up a fresh user through the API and leave its address unverified (it cannot accept invitations yet). */
export async function signUpUnverified(h: Harness, fullName = 'Test User'): Promise<SignedInUser> {
  const email = `${unique('u')}@example.com`.toLowerCase();
  const password = 'correct horse battery staple';
  const res = await h.request({ method: 'POST', url: '/auth/signup', payload: { email, password, full_name: fullName } });
  if (res.statusCode !== 201) throw new Error(`signup failed: ${res.statusCode} ${res.body}`);
  const data = res.json().data as { access_token: string; refresh_token: string; user: { id: string } };
  return { userId: data.user.id, email, password, accessToken: data.access_token, refreshToken: data.refresh_token };
}

/**
 * Prove a user's address as its owner would: a fresh link made by the service verb (and mailed, as
 * any), its token posted to POST /auth/verify-email. From a documentation address, so the test's own
 * client IP keeps its hourly window.
 */
export async function verifyEmailOf(h: Harness, userId: string): Promise<void> {
  const { token } = await startEmailVerification(h.ctx, userId);
  const res = await h.request({ method: 'POST', url: '/auth/verify-email', payload: { token }, remoteAddress: '192.0.2.201' });
  if (res.statusCode !== 200) throw new Error(`verify email failed: ${res.statusCode} ${res.body}`);
}

/** A signed-up user who owns a new organization (created through POST /organizations). */
export async function signUpWithOrganization(
  h: Harness,
  slugPrefix = 'org',
): Promise<SignedInUser & { organizationId: string; deploymentId: string; deploymentSecret: string }> {
  const user = await signUp(h);
  const slug = unique(slugPrefix).toLowerCase().replace(/[^a-z0-9-]/g, '-');
  const res = await h.request({
    method: 'POST',
    url: '/organizations',
    headers: bearer(user.accessToken),
    payload: { name: `Org ${slug}`, slug },
  });
  if (res.statusCode !== 201) throw new Error(`create organization failed: ${res.statusCode} ${res.body}`);
  const data = res.json().data as { id: string; deployment: { id: string; secret: string } };
  return { ...user, organizationId: data.id, deploymentId: data.deployment.id, deploymentSecret: data.deployment.secret };
}

// ---- Helpers for the API key, deployment, audit, billing and /api/users/me tests. ----

import { addMember } from '../src/modules/organizations/service.js';

/** A fresh signed-up user made a member of `organizationId` with `role` (service layer; the members API is tested on its own). */
export async function signUpAsMember(
  h: Harness,
  organizationId: string,
  role: 'owner' | 'admin' | 'member' | 'viewer',
): Promise<SignedInUser> {
  const user = await signUp(h);
  await addMember(h.ctx, { organizationId, userId: user.userId, role });
  return user;
}

/** Create an organization API key over HTTP (POST /organizations/{id}/api-keys); throws unless 201. */
export async function createKeyOverHttp(
  h: Harness,
  headers: Record<string, string>,
  organizationId: string,
  body: { name?: string; scopes?: Scope[]; expires_at?: string | null } = {},
): Promise<{ id: string; key: string; key_prefix: string; scopes: Scope[]; created_by: string | null; expires_at: string | null }> {
  const res = await h.request({
    method: 'POST',
    url: `/organizations/${organizationId}/api-keys`,
    headers,
    payload: { name: 'test key', ...body },
  });
  if (res.statusCode !== 201) throw new Error(`create API key failed: ${res.statusCode} ${res.body}`);
  return res.json().data;
}

/** Operator: set a deployment's tier through PUT /api/v1/admin/deployments/{id}. */
export async function setTierOverHttp(h: Harness, deploymentId: string, tier: Tier): Promise<void> {
  const res = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${deploymentId}`, headers: adminHeaders(h), payload: { tier } });
  if (res.statusCode !== 200) throw new Error(`set tier failed: ${res.statusCode} ${res.body}`);
}

// ---- Helpers for the members and invitations tests. ----

/**
 * A fresh signed-up user who joins `organizationId` with `role` through the real flow: invited over
 * HTTP by `inviterHeaders` (owner invitations on the /api path), then accepting with their own token.
 */
export async function joinByInvitation(
  h: Harness,
  inviterHeaders: Record<string, string>,
  organizationId: string,
  role: 'owner' | 'admin' | 'member' | 'viewer',
): Promise<SignedInUser> {
  const user = await signUp(h, `Joined ${role}`);
  const url = role === 'owner' ? `/api/organizations/${organizationId}/invitations` : `/organizations/${organizationId}/users`;
  const invited = await h.request({ method: 'POST', url, headers: inviterHeaders, payload: { email: user.email, role } });
  if (invited.statusCode !== 201) throw new Error(`invite failed: ${invited.statusCode} ${invited.body}`);
  const token = (invited.json().data as { token: string }).token;
  const accepted = await h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(user.accessToken) });
  if (accepted.statusCode !== 200) throw new Error(`accept failed: ${accepted.statusCode} ${accepted.body}`);
  return user;
}

/** The same secret with its last character changed (never equal to the original, whatever it ends with). */
export function mistyped(secret: string): string {
  return `${secret.slice(0, -1)}${secret.endsWith('0') ? '1' : '0'}`;
}

/**
 * Fan out every pending outbox event (src/modules/events/outbox.ts dispatchPending) at `now`, pass after
 * pass until one finds nothing: the worker's database may hold events earlier files left pending, older
 * than the test's own, which one pass of a fixed batch would take first. Returns how many were taken.
 */
export async function dispatchAllPending(db: Database, now: Date): Promise<number> {
  let taken = 0;
  for (let pass = 0; pass < 100; pass++) {
    const n = await dispatchPending(db, now, 100);
    if (n === 0) return taken;
    taken += n;
  }
  throw new Error('dispatchPending kept finding events after 100 passes');
}
