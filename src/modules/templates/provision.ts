import { type Deps, systemCtx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { forwardableHeaders } from '../webhooks/deliver.js';
import { MAX_ATTEMPTS, WEBHOOK_BACKOFF } from '../webhooks/organization.js';
import { signatureHeaders } from '../webhooks/signing.js';
import { checkTargetUrl } from '../webhooks/ssrf.js';
import type { TemplateRow } from './catalog.js';
import { auditTransition, type Status, type TemplateDeploymentRow } from './deployments.js';
import { provisionedDomain } from './domain-claims.js';
import { exhausted, type JobOutcome, type JobPolicy, type JobQueue, retryAt, runJobs } from '../../workers/jobs.js';

/**
 * The provisioning worker (docs/templates.md, Provisioners; declared in src/workers/catalog.ts):
 * claims due deployments with FOR UPDATE SKIP LOCKED and a lease, so any number of instances may run it; `pending` becomes
 * `deploying` at the claim; the provisioner's answer makes it `active`, or schedules the next attempt
 * with the organization webhooks' backoff (30 s, 2 min, 10 min, 1 h, ±20 %), or after 5 attempts
 * makes it `failed` with the last error. Each status change writes its audit row in the same transaction.
 */

/** A claimed row is leased this long: well past one provisioner call (the webhook attempt timeout, 10 s). */
export const LEASE_MS = 120_000;
/** last_error keeps this many characters. */
const ERROR_LIMIT = 1000;
export const PROVISION_EVENT = 'template_deployment.provision';

/** The `template-provisioning` queue's policy (docs/jobs.md): the organization webhooks' attempts and backoff; a batch's calls all at once. */
export const PROVISION_POLICY: JobPolicy = { batchSize: 10, leaseMs: LEASE_MS, maxAttempts: MAX_ATTEMPTS, backoff: WEBHOOK_BACKOFF, concurrency: Infinity };

type ClaimedRow = TemplateDeploymentRow & { was: Status };

type Outcome = { ok: true; deploymentUrl: string } | { ok: false; error: string; final: boolean; retryAfterMs: number | null };

/**
 * The `template-provisioning` queue (docs/jobs.md): due deployments, pending or deploying, whose
 * lease (leased_until) is not held become `deploying` at the claim, with their audit row in the
 * claim's transaction; each is then attempted once, all of a batch at once.
 */
export const PROVISION_QUEUE: JobQueue<ClaimedRow, Deps> = {
  name: 'template-provisioning',
  table: 'template_deployments',
  policy: PROVISION_POLICY,
  claim: {
    name: 'template-provisioning',
    table: 'template_deployments',
    key: 'id',
    pending: "q.status IN ('pending', 'deploying')",
    dueAt: 'q.next_attempt_at',
    lease: { kind: 'column', column: 'leased_until' },
    // A deleted organization's deployments are not provisioned (its keys and secrets stopped too).
    where: ['NOT EXISTS (SELECT 1 FROM organizations o WHERE o.id = q.organization_id AND o.deleted_at IS NOT NULL)'],
    select: ['q.status AS was'],
    set: ["status = 'deploying'", 'updated_at = :now'],
    orderBy: 'q.next_attempt_at',
    returning: 'j.*, due.was',
  },
  async onClaim(tx, rows, deps) {
    const ctx = systemCtx(deps);
    for (const row of rows) if (row.was === 'pending') await auditTransition(tx, ctx, row, 'pending');
  },
  keyOf: (row) => row.id,
  async handle({ row, leaseUntil }, deps) {
    return record(deps, row, leaseUntil!, await provision(deps, row));
  },
};

/** One pass (PROVISION_QUEUE through the job runner): claim up to `batch` due deployments and attempt each once. Returns how many it claimed. */
export function provisionDue(deps: Deps, batch: number): Promise<number> {
  return runJobs(deps, PROVISION_QUEUE, { batch });
}

/**
 * The provisioner's URL is the operator's, not a tenant's: TEMPLATE_PROVISIONER_ALLOW_PRIVATE lets it be
 * on a private network without opening tenants' webhooks to one (docs/templates.md, Provisioners);
 * WEBHOOK_ALLOW_PRIVATE_NETWORKS, which opens both, lets it too.
 */
const provisionerMayBePrivate = (deps: Deps) => deps.config.templateProvisionerAllowPrivate || deps.config.webhookAllowPrivateNetworks;

/** The built-in provisioner, or a signed POST to TEMPLATE_PROVISIONER_URL through the SSRF guard. */
async function provision(deps: Deps, row: TemplateDeploymentRow): Promise<Outcome> {
  const defaultUrl = `https://${row.subdomain}.${deps.config.templateBaseDomain}`;
  const target = deps.config.templateProvisionerUrl;
  if (!target) return { ok: true, deploymentUrl: defaultUrl };
  const templates = await deps.db.query<TemplateRow>('SELECT * FROM templates WHERE id = $1', [row.template_id]);
  const template = templates[0]!;
  let url: URL;
  try {
    url = checkTargetUrl(target, provisionerMayBePrivate(deps));
  } catch (err) {
    return { ok: false, error: (err as Error).message, final: true, retryAfterMs: null };
  }
  const now = deps.clock.now();
  const body = Buffer.from(
    JSON.stringify({
      id: row.id,
      type: PROVISION_EVENT,
      created_at: now.toISOString(),
      data: {
        attempt: row.attempts + 1,
        template: { id: template.id, slug: template.slug, name: template.name, config: template.config },
        deployment: {
          id: row.id,
          organization_id: row.organization_id,
          template_id: row.template_id,
          name: row.name,
          subdomain: row.subdomain,
          // Only a verified domain: a claim proves nothing yet (docs/templates.md, Custom domains).
          custom_domain: provisionedDomain(row),
          config: row.config,
        },
      },
    }),
  );
  const headers = {
    ...forwardableHeaders({}),
    'content-type': 'application/json',
    'user-agent': 'creditgate-templates/1',
    'x-service-event': PROVISION_EVENT,
    'x-service-delivery': row.id,
    ...signatureHeaders({ secret: deps.config.templateProvisionerSecret ?? '', webhookId: row.id, timestamp: Math.floor(now.getTime() / 1000), body }),
  };
  const outcome = await deps.provisionerOutbound.attempt({ url, method: 'POST', headers, body });
  if (!outcome.ok) {
    // The organization reads last_error (every role): the provisioner's own words (stack traces, internal
    // host names) go to the operator's log only.
    if (outcome.responseBody) {
      deps.log.warn({ templateDeployment: row.id, body: outcome.responseBody.replace(/\s+/g, ' ').slice(0, 500) }, 'the template provisioner refused');
    }
    return { ok: false, error: outcome.error ?? 'Provisioner failed', final: outcome.blocked, retryAfterMs: outcome.retryAfterMs };
  }
  return answerOf(outcome.responseBody ?? '', defaultUrl);
}

/** A 2xx answer `{deployment_url?}`: an empty or non-JSON body means the default URL; a deployment_url that is not http(s) is a failed attempt. */
function answerOf(text: string, defaultUrl: string): Outcome {
  let parsed: unknown;
  try {
    parsed = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    return { ok: true, deploymentUrl: defaultUrl };
  }
  const given = (parsed as { deployment_url?: unknown } | null)?.deployment_url;
  if (given === undefined || given === null) return { ok: true, deploymentUrl: defaultUrl };
  if (typeof given === 'string' && given.length <= 2000 && /^https?:\/\/[^/?#\s]/i.test(given) && URL.canParse(given)) {
    return { ok: true, deploymentUrl: given };
  }
  return { ok: false, error: 'The provisioner answered 2xx with a deployment_url that is not an http(s) URL', final: false, retryAfterMs: null };
}

/** The attempt's result, written only if this worker still holds the lease (guarded write); `skipped` when it no longer did. */
async function record(deps: Deps, row: TemplateDeploymentRow, lease: Date, outcome: Outcome): Promise<JobOutcome> {
  const ctx = systemCtx(deps);
  const now = deps.clock.now();
  const attempts = row.attempts + 1;
  return deps.db.transaction(async (tx: Queryable): Promise<JobOutcome> => {
    const guard = 'WHERE id = $1 AND status = \'deploying\' AND leased_until = $2 RETURNING *';
    if (outcome.ok) {
      // Active only if the provisioner was given the custom domain the row holds now: a verification (or
      // a release) during the call makes the row due again at once instead (a success, so attempts stay).
      const rows = await tx.query<TemplateDeploymentRow>(
        `UPDATE template_deployments SET status = 'active', deployment_url = $3, last_error = NULL, attempts = $4,
           next_attempt_at = NULL, leased_until = NULL, updated_at = $5
         WHERE id = $1 AND status = 'deploying' AND leased_until = $2
           AND (CASE WHEN custom_domain_status = 'verified' THEN custom_domain END) IS NOT DISTINCT FROM $6::text RETURNING *`,
        [row.id, lease, outcome.deploymentUrl, attempts, now, provisionedDomain(row)],
      );
      if (rows[0]) {
        await auditTransition(tx, ctx, rows[0], 'deploying', { deployment_url: outcome.deploymentUrl });
        return 'done';
      }
      const again = await tx.query(`UPDATE template_deployments SET next_attempt_at = $3, leased_until = NULL, updated_at = $3 ${guard}`, [row.id, lease, now]);
      return again.length > 0 ? 'retry' : 'skipped';
    }
    const error = outcome.error.slice(0, ERROR_LIMIT);
    if (outcome.final || exhausted(PROVISION_POLICY, attempts)) {
      const rows = await tx.query<TemplateDeploymentRow>(
        `UPDATE template_deployments SET status = 'failed', last_error = $3, attempts = $4, next_attempt_at = NULL, leased_until = NULL, updated_at = $5 ${guard}`,
        [row.id, lease, error, attempts, now],
      );
      if (!rows[0]) return 'skipped';
      await auditTransition(tx, ctx, rows[0], 'deploying', { error });
      return 'failed';
    }
    const next = retryAt(PROVISION_POLICY, attempts, now, { retryAfterMs: outcome.retryAfterMs });
    const rows = await tx.query(
      `UPDATE template_deployments SET last_error = $3, attempts = $4, next_attempt_at = $5, leased_until = NULL, updated_at = $6 ${guard}`,
      [row.id, lease, error, attempts, next, now],
    );
    return rows.length > 0 ? 'retry' : 'skipped';
  });
}
