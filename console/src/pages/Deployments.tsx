import { useCallback, useState } from 'react';
import { api } from '../api';
import { useOrg } from '../org';
import { ConfirmButton, ErrorNote, fmtDate, fmtInt, Loading, LoadError, PageHeader, SecretOnce, useAction, useLoad } from '../ui';
import { LoadMore, usePages } from './paging';
import type { Deployment } from './Overview';
import type { Schemas } from '../types';

/** GET /organizations/{id}/deployments/{depId}/entitlements: what POST /api/v1/entitlements/check answers the deployment. */
type Snapshot = Schemas['EntitlementSnapshot'];

const FLAG_LABELS: Array<[keyof Snapshot['features'], string]> = [
  ['mcp_enabled', 'MCP metering'],
  ['ai_enabled', 'AI proxy'],
  ['billing_enabled', 'Billing'],
  ['custom_domain', 'Custom domain'],
  ['white_label', 'White label'],
];

type Rotated = Schemas['DeploymentSecretRotated'];

export function Deployments() {
  const { org, can } = useOrg();
  const load = useCallback(
    (cursor: string | null) => api.list('/organizations/{id}/deployments', { params: { path: { id: org.id }, query: { limit: 20, cursor: cursor ?? undefined } } }),
    [org.id],
  );
  const deployments = usePages(load, [org.id]);
  return (
    <>
      <PageHeader title="Deployments" />
      <p className="muted">
        A deployment is what credits are metered against. MCP servers in service mode and the entitlement check authenticate with its id and
        secret; the secret is shown once, when it is made or rotated.
      </p>
      <LoadError error={deployments.error} retry={deployments.retry} what="deployments" busy={deployments.loading || deployments.loadingMore} />
      {deployments.loading ? (
        <Loading what="deployments" shape="cards" rows={2} />
      ) : deployments.error && deployments.items.length === 0 ? null : deployments.items.length === 0 ? (
        <p className="muted">No deployments.</p>
      ) : (
        deployments.items.map((d) => (
          <DeploymentCard
            key={d.id}
            orgId={org.id}
            deployment={d}
            manage={can('deployments.manage')}
            onRotated={(r) => deployments.setItems((items) => items.map((x) => (x.id === r.deployment_id ? { ...x, secret_prefix: r.secret_prefix } : x)))}
          />
        ))
      )}
      {deployments.next ? <LoadMore pages={deployments} one="deployment" /> : null}
    </>
  );
}

function DeploymentCard({ orgId, deployment: d, manage, onRotated }: { orgId: string; deployment: Deployment; manage: boolean; onRotated: (r: Rotated) => void }) {
  const [rotated, setRotated] = useState<Rotated | null>(null);
  const rotate = useAction();
  const b = d.balance;
  const headingId = `deployment-${d.id}`;
  return (
    <section className="panel" aria-labelledby={headingId} data-testid={`deployment-${d.id}`}>
      <h2 id={headingId}>
        {d.name} <span className="badge">{d.tier}</span> <span className="badge">{d.status}</span>{' '}
        {d.is_primary ? <span className="badge">primary</span> : null}
      </h2>
      <dl className="facts">
        <dt>Deployment id</dt>
        <dd>
          <code>{d.id}</code>
        </dd>
        <dt>Secret</dt>
        <dd>
          <code>{d.secret_prefix}…</code>
        </dd>
        <dt>Available credits</dt>
        <dd>{fmtInt(b.available)}</dd>
        <dt>Monthly credits used</dt>
        <dd>
          {fmtInt(b.monthly_used)} of {fmtInt(b.monthly_allocation)} ({fmtInt(b.monthly_remaining)} left)
        </dd>
        <dt>Purchased credits</dt>
        <dd>{fmtInt(b.purchased)}</dd>
        <dt>Held by reservations</dt>
        <dd>{fmtInt(b.reserved)}</dd>
        <dt>Period</dt>
        <dd>
          {fmtDate(b.period_start)} to {fmtDate(b.period_end)}
        </dd>
      </dl>

      {rotated ? (
        <SecretOnce label={`New secret of ${d.name}`} value={rotated.secret} onDone={() => setRotated(null)} />
      ) : manage ? (
        <div>
          <ConfirmButton
            label="Rotate secret"
            confirmLabel="Rotate now: the old secret stops working at once"
            onConfirm={async () => {
              await rotate.run(async () => {
                const r = await api.POST('/organizations/{id}/deployments/{depId}/secret', { params: { path: { id: orgId, depId: d.id } } });
                onRotated(r);
                setRotated(r);
              });
            }}
          />
          <ErrorNote error={rotate.error} />
        </div>
      ) : null}

      <Entitlements orgId={orgId} depId={d.id} name={d.name} />
    </section>
  );
}

function Entitlements({ orgId, depId, name }: { orgId: string; depId: string; name: string }) {
  const snapshot = useLoad(() => api.GET('/organizations/{id}/deployments/{depId}/entitlements', { params: { path: { id: orgId, depId } } }), [orgId, depId]);
  const s = snapshot.data;
  return (
    <section aria-label={`Entitlements of ${name}`}>
      <h3>Entitlements</h3>
      <LoadError error={snapshot.error} retry={snapshot.reload} what={`the entitlements of ${name}`} busy={snapshot.loading} />
      {!s ? (
        snapshot.loading && !snapshot.error ? (
          <Loading what={`the entitlements of ${name}`} shape="lines" />
        ) : null
      ) : (
        <>
          {s.message ? <p role="status">{s.message}</p> : null}
          <div className="columns">
            <div>
              <h4>Features</h4>
              <ul className="flags" data-testid="flags">
                {FLAG_LABELS.map(([flag, label]) => (
                  <li key={flag} data-flag={flag}>
                    {label}: <strong>{s.features[flag] ? 'on' : 'off'}</strong>
                  </li>
                ))}
              </ul>
            </div>
            <div>
              <h4>Limits</h4>
              <table data-testid="limits">
                <thead>
                  <tr>
                    <th scope="col">Limit</th>
                    <th scope="col">Value</th>
                  </tr>
                </thead>
                <tbody>
                  <tr>
                    <th scope="row">AI tokens per period</th>
                    <td>{fmtInt(s.features.ai_monthly_limit)}</td>
                  </tr>
                  <tr>
                    <th scope="row">AI tokens used</th>
                    <td>
                      {fmtInt(s.quotas.ai_tokens.used)} ({fmtInt(s.quotas.ai_tokens.remaining)} left, resets {fmtDate(s.quotas.ai_tokens.resets_at)})
                    </td>
                  </tr>
                  <tr>
                    <th scope="row">API requests per minute</th>
                    <td>{fmtInt(s.features.api_rate_limit)}</td>
                  </tr>
                  <tr>
                    <th scope="row">Support</th>
                    <td>{s.features.support_level}</td>
                  </tr>
                </tbody>
              </table>
            </div>
          </div>
        </>
      )}
    </section>
  );
}
