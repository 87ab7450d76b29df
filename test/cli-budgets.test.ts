import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliRun, runCli } from './cli-fixtures.js';
import { createHarness, createTenant, type Harness } from './harness.js';

/**
 * The budget commands (docs/cli.md) against a real service: the CLI (src/cli.ts through tsx) talks
 * to this process's service over loopback with the operator key, and what each command did is read
 * back from the database. What the commands send and their usage errors are in
 * cli-commands.unit.test.ts; this proves the real operator API takes what they send.
 */
let h: Harness;
let url: string;
beforeAll(async () => {
  h = await createHarness();
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await h.close();
});

/** The CLI against this process's service (test/cli-fixtures.ts). */
const cli = (...args: string[]): Promise<CliRun> => runCli(url, h.config.adminApiKey, ...args);

const rows = (organizationId: string) =>
  h.deps.db.query<{ id: string; scope: string; deployment_id: string | null; limit_credits: string | null; window_kind: string; mode: string }>(
    'SELECT id, scope, deployment_id, limit_credits::text AS limit_credits, window_kind, mode FROM budgets WHERE organization_id = $1 ORDER BY created_at',
    [organizationId],
  );

describe('creditgate budget commands against the operator API', () => {
  it('create, list, show, change and delete a budget; each change is in the database', { timeout: 120_000 }, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const created = await cli('budget-create', t.organizationId, 'deployment', 'day', '--deployment', t.deploymentId, '--limit-credits', '500', '--alert-thresholds', '50,100');
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const budget = JSON.parse(created.stdout) as { id: string };
    expect(budget).toMatchObject({ scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 500, window: 'day', mode: 'block', alert_thresholds: [50, 100], spent_credits: 0 });
    expect(await rows(t.organizationId)).toEqual([{ id: budget.id, scope: 'deployment', deployment_id: t.deploymentId, limit_credits: '500', window_kind: 'day', mode: 'block' }]);

    const [listed, shown] = await Promise.all([cli('budgets', t.organizationId), cli('budget', t.organizationId, budget.id)]);
    expect(listed.code).toBe(0);
    expect((JSON.parse(listed.stdout) as { budgets: Array<{ id: string }> }).budgets.map((b) => b.id)).toEqual([budget.id]);
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: budget.id, remaining_credits: 500 });

    const changed = await cli('budget-update', t.organizationId, budget.id, '--limit-credits', '800', '--mode', 'alert', '--window', 'week');
    expect(changed).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(changed.stdout)).toMatchObject({ id: budget.id, limit_credits: 800, mode: 'alert', window: 'week' });
    expect(await rows(t.organizationId)).toEqual([expect.objectContaining({ limit_credits: '800', mode: 'alert', window_kind: 'week' })]);

    const deleted = await cli('budget-delete', t.organizationId, budget.id);
    expect(deleted).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(deleted.stdout)).toMatchObject({ id: budget.id });
    expect(await rows(t.organizationId)).toEqual([]);
  });

  it("the service's refusals are one line and exit 1: another organization's deployment, a budget that is not there", { timeout: 120_000 }, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'launch' });
    const [foreign, missing] = await Promise.all([
      cli('budget-create', t.organizationId, 'deployment', 'day', '--deployment', other.deploymentId, '--limit-credits', '5'),
      cli('budget', t.organizationId, '7d2e4f6a-8b1c-4d3e-9f5a-6b7c8d9e0f1a'),
    ]);
    expect(foreign).toMatchObject({ code: 1, stdout: '' });
    expect(foreign.stderr).toMatch(/^creditgate: .*deployment_id.* \[INVALID_REQUEST, HTTP 400\]\n$/);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr).toMatch(/^creditgate: .* \[NOT_FOUND, HTTP 404\]\n$/);
    expect(await rows(t.organizationId)).toEqual([]);
  });
});
