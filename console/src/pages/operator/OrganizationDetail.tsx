import { type FormEvent, useState } from 'react';
import { Field, fmtDate, Loading, useLoad } from '../../ui';
import { OperatorError, oneOf, type OrganizationHit, Outcome, PLANS, useOperator, useOperatorAction } from './common';
import { DeploymentPanel } from './DeploymentPanel';

/** One organization: its plan and its deployments with their balances, each changeable. */
export function OrganizationDetail({
  organization: o,
  onPlanChanged,
  onChanged,
  onClose,
}: {
  organization: OrganizationHit;
  onPlanChanged: (plan: string) => void;
  onChanged: () => void;
  onClose: () => void;
}) {
  const call = useOperator();
  const deployments = useLoad(
    () => call.GET('/api/v1/admin/deployments', { params: { query: { organization_id: o.id } } }),
    [call, o.id],
  );
  const changed = () => {
    deployments.reload();
    onChanged();
  };
  return (
    <section aria-labelledby="organization-name" className="operator-detail" data-testid="organization-detail">
      <header className="page-header">
        <h2 id="organization-name">{o.name}</h2>
        <span className="badge">{o.plan}</span>
        {o.deleted_at ? <span className="badge warning">Deleted {fmtDate(o.deleted_at)}</span> : null}
        <span className="spacer" />
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </header>
      <p className="muted small">
        <code>{o.slug}</code> · id <code>{o.id}</code> · created {fmtDate(o.created_at)}
      </p>
      <PlanForm organization={o} onPlanChanged={onPlanChanged} onChanged={onChanged} />

      <h3>Deployments</h3>
      <OperatorError error={deployments.error} retry={deployments.reload} what="deployments" busy={deployments.loading} />
      {!deployments.data ? (
        deployments.loading && !deployments.error ? (
          <Loading what="deployments" shape="cards" rows={1} />
        ) : null
      ) : deployments.data.deployments.length === 0 ? (
        <p className="muted">This organization has no deployments.</p>
      ) : (
        deployments.data.deployments.map((d) => <DeploymentPanel key={d.id} deployment={d} onChanged={changed} />)
      )}
    </section>
  );
}

function PlanForm({ organization: o, onPlanChanged, onChanged }: { organization: OrganizationHit; onPlanChanged: (plan: string) => void; onChanged: () => void }) {
  const call = useOperator();
  const [plan, setPlan] = useState(o.plan);
  const action = useOperatorAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await action.run(async () => {
      const chosen = oneOf(PLANS, plan);
      if (!chosen) throw new Error('Choose a plan');
      const answer = await call.PUT('/api/v1/admin/organizations/{id}', { params: { path: { id: o.id } }, body: { plan: chosen } });
      onPlanChanged(answer.plan);
      onChanged();
      return `The plan of ${o.name} is now ${answer.plan}.`;
    });
  };
  return (
    <section aria-labelledby="organization-plan">
      <h3 id="organization-plan">Plan</h3>
      <form className="inline" onSubmit={submit}>
        <Field label="Organization plan">
          <select value={plan} onChange={(e) => setPlan(e.target.value)}>
            {PLANS.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" disabled={action.busy || plan === o.plan}>
          Set plan
        </button>
      </form>
      <Outcome action={action} />
    </section>
  );
}
