import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { bearer, createHarness, createTenant, type Harness, json, signUp, signUpWithOrganization } from './harness.js';

let h: Harness;

/** An app on the harness database whose logs (at trace level) are kept in `output()`. */
async function capturingApp(logLevel = 'trace', logFormat: 'json' | 'pretty' = 'json') {
  let output = '';
  const stream = new Writable({
    write(chunk, _encoding, done) {
      output += chunk.toString();
      done();
    },
  });
  const config = testConfig({ logLevel, logFormat });
  const app = await buildApp({ config, db: h.deps.db, clock: h.clock, logStream: stream });
  return { app, config, output: () => output };
}

beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

describe('logs', () => {
  it('never contain a bearer secret, even at debug level and on errors', async () => {
    const t = await createTenant(h);
    const { app, config, output: logs } = await capturingApp();
    try {
      app.get('/api/v1/log-probe', { config: { auth: 'public' } }, async (request) => {
        // What a careless log line would do: dump the request with its headers.
        request.log.info({ req: request, headers: request.headers }, 'probe');
        throw new Error('boom');
      });
      await app.ready();
      const secrets = {
        ...bearer(t.apiKey),
        'x-admin-key': config.adminApiKey,
        'x-mcp-service-key': config.mcpServiceKey,
        'x-deployment-id': t.deploymentId,
        'x-deployment-secret': t.deploymentSecret,
      };
      await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: secrets, payload: { tool_name: 'x' } });
      await app.inject({ method: 'GET', url: '/api/v1/admin/deployments', headers: secrets });
      const probe = await app.inject({ method: 'GET', url: '/api/v1/log-probe', headers: secrets });
      expect(probe.statusCode).toBe(500);
      expect(probe.json()).toMatchObject({ code: 'INTERNAL_ERROR', message: 'Internal error' });
      expect(probe.body).not.toContain('boom');
      const output = logs();
      expect(output).toContain('incoming request');
      expect(output).toContain('[redacted]');
      for (const secret of [t.apiKey, config.adminApiKey, config.mcpServiceKey, t.deploymentSecret]) {
        expect(output).not.toContain(secret);
      }
    } finally {
      await app.close();
    }
  });

  it("a request's lines carry its request id, through children too; lines below the level are not written", async () => {
    const { app, output } = await capturingApp('warn');
    try {
      app.get('/api/v1/log-probe', { config: { auth: 'public' } }, async (request) => {
        request.log.info('below the level');
        request.log.warn({ step: 1 }, 'at the level');
        request.log.child({ part: 'nested' }).error('from a child');
        return { ok: true, id: request.id };
      });
      await app.ready();
      const res = await app.inject({ method: 'GET', url: '/api/v1/log-probe' });
      expect(res.statusCode).toBe(200);
      const id = res.json<{ id: string }>().id;
      const lines = output()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.some((l) => l.msg === 'below the level')).toBe(false);
      expect(lines.find((l) => l.msg === 'at the level')).toMatchObject({ reqId: id, step: 1, level: 40 });
      expect(lines.find((l) => l.msg === 'from a child')).toMatchObject({ reqId: id, part: 'nested', level: 50 });
    } finally {
      await app.close();
    }
  });

  it('never contain an invitation token from a URL path or a ?token= query, whatever the answer (docs/accounts.md, Account safety)', async () => {
    const owner = await signUpWithOrganization(h);
    const other = await signUp(h);
    const invited = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: bearer(owner.accessToken),
      payload: { email: `${owner.organizationId}-guest@example.com` },
    });
    const { token } = json<{ data: { token: string } }>(invited).data;
    const { app, output } = await capturingApp();
    try {
      app.get('/log-probe/:token', { config: { auth: 'public', secretParams: ['token'] } }, async (request) => {
        // Careless log lines with the whole request (Fastify's and Node's), then a crash: the 500 path logs no secret either.
        request.log.info({ req: request }, 'probe');
        request.log.info({ req: request.raw }, 'probe raw');
        throw new Error('boom');
      });
      await app.ready();
      expect((await app.inject({ method: 'GET', url: `/invitations/${token}` })).statusCode).toBe(200);
      // Accepted by someone else (403 after the token was looked up) and without a session (401 before the handler).
      expect((await app.inject({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(other.accessToken) })).statusCode).toBe(403);
      expect((await app.inject({ method: 'POST', url: `/invitations/${token}/accept` })).statusCode).toBe(401);
      // No route answers the first two, but they still carry the token; the page ignores a query.
      expect((await app.inject({ method: 'GET', url: `/invitations/${token}/typo` })).statusCode).toBe(404);
      expect((await app.inject({ method: 'GET', url: `//invitations//${token}` })).statusCode).toBe(404);
      expect((await app.inject({ method: 'GET', url: `/verify-email?lang=en&Token=${token}` })).statusCode).toBe(200);
      expect((await app.inject({ method: 'GET', url: `/log-probe/${token}?token=${token}` })).statusCode).toBe(500);
      const logged = output();
      expect(logged).toContain('unhandled error');
      expect(logged).toContain(`"url":"/invitations/[redacted]/accept"`);
      expect(logged).toContain(`"url":"/verify-email?lang=en&Token=[redacted]"`);
      expect(logged).toContain(`"url":"/log-probe/[redacted]?token=[redacted]"`);
      expect(logged).not.toContain(token);
      expect(logged).not.toContain(token.slice('cginv_'.length));
    } finally {
      await app.close();
    }
  });

  it('never contain a token sent as /invitations%2F<token> or in any query parameter; UUIDs stay readable (docs/accounts.md, "Secrets in logs")', async () => {
    const owner = await signUpWithOrganization(h);
    const invited = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: bearer(owner.accessToken),
      payload: { email: `${owner.organizationId}-encoded@example.com` },
    });
    const { token } = json<{ data: { token: string } }>(invited).data;
    const { app, output } = await capturingApp();
    try {
      await app.ready();
      // The review's attack URLs: no route pattern matches them, so only the shape of the value can hide it.
      const attacks = [
        `/invitations%2F${token}`,
        `/invitations%2f${token}/accept`,
        `/organizations/${owner.organizationId}?foo=${token}`,
        `/verify-email?next=%2Finvitations%2F${token}`,
        `/x?${token}`,
      ];
      for (const url of attacks) expect((await app.inject({ method: 'GET', url })).statusCode, url).toBeLessThan(500);
      const logged = output();
      expect(logged).toContain(`"url":"/invitations%2F[redacted]"`);
      expect(logged).toContain(`"url":"/organizations/${owner.organizationId}?foo=[redacted]"`);
      expect(logged).toContain(`"url":"/verify-email?next=%2Finvitations%2F[redacted]"`);
      expect(logged).not.toContain(token);
      expect(logged).not.toContain(token.slice('cginv_'.length));
    } finally {
      await app.close();
    }
  });

  it('never contain the statement, the parameters or the key values of a database error, on either database, json or pretty (docs/operations.md, "Secrets in logs")', async () => {
    for (const format of ['json', 'pretty'] as const) {
      const { app, output } = await capturingApp('warn', format);
      const secret = `password-hash-in-a-parameter-${format}`;
      const taken = await signUp(h);
      try {
        // Statements that fail at the database, uncaught: the 500 path logs the error whole.
        app.get('/api/v1/log-probe/invalid', { config: { auth: 'public' } }, async () => {
          await h.deps.db.query('INSERT INTO users (id, email, password_hash, created_at, updated_at) VALUES ($1, $2, $3, now(), now())', [
            'not-a-uuid',
            `${format}-victim@example.com`,
            secret,
          ]);
        });
        app.get('/api/v1/log-probe/duplicate', { config: { auth: 'public' } }, async () => {
          // A unique violation: PostgreSQL's detail quotes the key, `Key (lower(email))=(…) already exists`.
          await h.deps.db.transaction((tx) =>
            tx.query('INSERT INTO users (email, password_hash, created_at, updated_at) VALUES ($1, $2, now(), now())', [taken.email, secret]),
          );
        });
        app.get('/api/v1/log-probe/division', { config: { auth: 'public' } }, async () => {
          await h.deps.db.query('SELECT $1::text, 1/0', [secret]);
        });
        await app.ready();
        for (const probe of ['invalid', 'duplicate', 'division']) {
          const res = await app.inject({ method: 'GET', url: `/api/v1/log-probe/${probe}` });
          expect(res.statusCode, probe).toBeGreaterThanOrEqual(400);
          expect(res.body).not.toContain(secret);
        }
        const logged = output();
        // The errors are there, with what finds the statement in the code...
        expect(logged, format).toContain('22P02');
        expect(logged, format).toContain('23505');
        expect(logged, format).toContain('22012');
        // ...and nothing of what the statement carried.
        for (const leak of [secret, taken.email, `${format}-victim@example.com`, 'INSERT INTO users', 'password_hash']) {
          expect(logged, `${format}: ${leak}`).not.toContain(leak);
        }
        expect(logged, format).not.toMatch(/"?(params|queryOptions|detail)"?:/);
      } finally {
        await app.close();
      }
    }
  });

  it('a database error leaves the database layer without the statement and its parameters (PGlite attaches them; docs/operations.md, "Secrets in logs")', async () => {
    const secret = 'password-hash-in-a-thrown-error';
    // Each failure is caught where it is made: on PostgreSQL they run at once, and one that fails
    // before it is awaited would be an unhandled rejection.
    const caught = (failure: Promise<unknown>) =>
      failure.then(
        () => null,
        (e: unknown) => e as Record<string, unknown>,
      );
    const failures = [
      caught(h.deps.db.query('SELECT $1::text, 1/0', [secret])),
      caught(h.deps.db.transaction((tx) => tx.query('SELECT $1::text, 1/0', [secret]))),
      caught(h.deps.db.transaction((tx) => tx.pipeline([{ text: 'SELECT 1' }, { text: 'SELECT $1::uuid', params: [secret] }]))),
      caught(h.deps.db.transaction((tx) => tx.queryAndCommit('SELECT $1::text, 1/0', [secret]))),
    ];
    for (const failure of failures) {
      const err = await failure;
      expect(err).not.toBeNull();
      expect(err!.code).toMatch(/^22/);
      for (const field of ['query', 'params', 'queryOptions']) expect(err![field], field).toBeUndefined();
      expect(JSON.stringify(err)).not.toContain(secret);
    }
  });

  it('never contain a secret sent in a query parameter named for one, or a standard base64 token, json or pretty (docs/operations.md, "Secrets in logs")', async () => {
    const password = 'correct horse battery staple';
    const base64Token = 'Qx7+Lm2/9aZ4kP+Tr8/Wq3Nv5Bs6Hy1Ue0Io='; // `openssl rand -base64`, as docs/operations-metrics.md suggests for METRICS_TOKEN
    const humanAdminKey = 'staging-admin-key-for-the-ops-team';
    const urls = [
      `/auth/login?email=a@example.com&password=${encodeURIComponent(password)}`,
      `/metrics?metrics_token=${encodeURIComponent(base64Token)}`,
      `/x?next=${encodeURIComponent(base64Token)}`,
      `/x?raw=${base64Token}`,
      `/api/v1/admin/deployments?admin_key=${humanAdminKey}`,
      `/api/v1/admin/deployments?x-admin-key=${humanAdminKey}&lang=en`,
      '/x?client_secret=short-Secret-1&signature=abc123def456&password=hunter2hunter2&pwd=Tr0ub4dor%263&passwd=p1&pass=p2',
      '/x?authorization=Basic%20b3BzOmh1bnRlcjI&sig=s1g&code=c0de-value&session=sess-value&jwt=j.w.t&id_token=idt-value',
    ];
    for (const format of ['json', 'pretty'] as const) {
      const { app, output } = await capturingApp('info', format);
      try {
        await app.ready();
        for (const url of urls) await app.inject({ method: 'GET', url });
        const logged = output();
        for (const leak of [
          password.replaceAll(' ', '%20'),
          'correct',
          'hunter2hunter2',
          'Tr0ub4dor',
          'Bs6Hy1Ue0Io',
          'Qx7',
          humanAdminKey,
          'short-Secret-1',
          'abc123def456',
          'b3BzOmh1bnRlcjI',
          's1g',
          'c0de-value',
          'sess-value',
          'j.w.t',
          'idt-value',
        ]) {
          expect(logged, `${format}: ${leak}`).not.toContain(leak);
        }
        // What is not a secret stays readable.
        expect(logged, format).toContain('x-admin-key=[redacted]&lang=en');
        expect(logged, format).toContain('/metrics?metrics_token=[redacted]');
      } finally {
        await app.close();
      }
    }
  });
});
