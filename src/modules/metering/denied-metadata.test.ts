import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json } from '../../../test/harness.js';

/**
 * A refused call's usage record keeps no metadata (docs/metering.md, Denials and what is recorded):
 * refusals cost nothing, so up to 16 KiB a call would be storage for free. A paid call keeps it.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { tenantWith } = creditFixtures(() => h);
const metadata = { note: 'x'.repeat(8000), run: 'r-1' };
const record = (apiKey: string, invocationId: string) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(apiKey), payload: { tool_name: 'meta_tool', invocation_id: invocationId, metadata } });
const storedMetadata = async (deploymentId: string, invocationId: string) =>
  (await h.deps.db.query<{ metadata: unknown; success: boolean }>('SELECT metadata, success FROM usage_records WHERE deployment_id = $1 AND invocation_id = $2', [deploymentId, invocationId]))[0];

describe('metadata of refused calls', () => {
  it('a sandbox refusal and a refusal for credits store none; a paid call stores it', async () => {
    const sandbox = await createTenant(h, { tier: 'sandbox' });
    expect(json(await record(sandbox.apiKey, 'sandboxed'))).toMatchObject({ success: false, error: 'sandbox_tier' });
    expect(await storedMetadata(sandbox.deploymentId, 'sandboxed')).toEqual({ metadata: null, success: false });

    const broke = await tenantWith(0);
    expect(json(await record(broke.apiKey, 'broke'))).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(await storedMetadata(broke.deploymentId, 'broke')).toEqual({ metadata: null, success: false });

    const paying = await tenantWith(10);
    expect(json(await record(paying.apiKey, 'paid'))).toMatchObject({ success: true });
    expect(await storedMetadata(paying.deploymentId, 'paid')).toEqual({ metadata, success: true });
  });
});
