import { expect } from 'vitest';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { adminHeaders, createTenant, grant, type Harness, type Tenant, unique } from './harness.js';

export interface Balance {
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
}

export interface LedgerRow {
  amount: number;
  monthly_delta: number;
  purchased_delta: number;
  usage_id: string | null;
}

/**
 * Fixtures of the suites that watch balances move (metering reservations, refunds): operator calls
 * that must succeed, a trial tenant with a given allocation, and readers of the balance row and the
 * ledger. `harness` is read at call time, so a file may create its harness in `beforeAll`.
 */
export function creditFixtures(harness: () => Harness) {
  const admin = async (method: 'PUT' | 'POST', url: string, payload: Record<string, unknown>): Promise<void> => {
    const res = await harness().request({ method, url, headers: adminHeaders(harness()), payload });
    expect(res.statusCode, `${method} ${url}: ${res.body}`).toBe(200);
  };
  const setMonthly = (id: string, credits: number) => admin('PUT', `/api/v1/admin/deployments/${id}/overrides`, { monthly_credits: credits });
  return {
    admin,
    setMonthly,
    /** A new tool of this run mapped to `action`. */
    async toolFor(action: string): Promise<string> {
      const tool = unique(`tool-${action}`);
      await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
      return tool;
    },
    /** A trial tenant whose monthly allocation is `monthly` (and nothing else unless `purchased`). */
    async tenantWith(monthly: number, purchased = 0): Promise<Tenant> {
      const t = await createTenant(harness(), { tier: 'trial' });
      await setMonthly(t.deploymentId, monthly);
      if (purchased > 0) await grant(harness(), t.deploymentId, purchased);
      return t;
    },
    async balanceOf(deploymentId: string): Promise<Balance> {
      const rows = await harness().deps.db.query<Balance>(
        'SELECT monthly_used, purchased_balance, reserved FROM credit_balances WHERE deployment_id = $1',
        [deploymentId],
      );
      return rows[0]!;
    },
    ledgerKinds: (deploymentId: string, kind: string) =>
      harness().deps.db.query<LedgerRow>(
        'SELECT amount, monthly_delta, purchased_delta, usage_id FROM credit_ledger WHERE deployment_id = $1 AND kind = $2 ORDER BY id',
        [deploymentId, kind],
      ),
    /** The ledger invariant for the tenant (docs/metering.md, Buckets and the ledger): the ledger sums to the balance, usage to the deductions. */
    async expectLedgerConsistent(t: Tenant): Promise<void> {
      expect(await findLedgerMismatches(harness().deps.db, t.organizationId)).toEqual([]);
    },
  };
}
