import { type FormEvent, useState } from 'react';
import { ConfirmButton, Field, fmtDate, fmtInt, Loading, PageHeader, useLoad } from '../../ui';
import { countOf } from '../../plural';
import { OperatorError, Outcome, segment, useOperator, useOperatorAction } from './common';

interface CreditCost {
  action: string;
  credits: number;
  description: string | null;
  updated_at: string;
}

interface ToolAction {
  tool_name: string;
  action: string;
  credits: number;
  updated_at: string;
}

/** The credit cost of every action and the tool → action mappings (docs/metering.md, Costs of tools), as stored now, with their edits. */
export function CostTables() {
  const call = useOperator();
  const costs = useLoad(() => call.GET('/api/v1/admin/credit-costs'), [call]);
  const tools = useLoad(() => call.GET('/api/v1/admin/tool-actions'), [call]);
  const [editing, setEditing] = useState<CreditCost | null>(null);
  const actions = costs.data?.credit_costs ?? [];
  // A cost change shows in the mappings too (their credits column).
  const reloadBoth = () => {
    costs.reload();
    tools.reload();
  };
  return (
    <>
      <PageHeader title="Costs and tools" />
      <section aria-labelledby="credit-costs">
        <h2 id="credit-costs">Credit costs</h2>
        <OperatorError error={costs.error} retry={costs.reload} what="credit costs" busy={costs.loading} />
        {!costs.data ? (
          costs.loading && !costs.error ? (
            <Loading what="credit costs" shape="table" />
          ) : null
        ) : (
          <div className="table-scroll">
          <table aria-label="Credit costs" data-testid="credit-costs">
            <thead>
              <tr>
                <th scope="col">Action</th>
                <th scope="col" className="num">
                  Credits
                </th>
                <th scope="col">Description</th>
                <th scope="col">Updated</th>
              </tr>
            </thead>
            <tbody>
              {actions.map((c) => (
                <tr key={c.action} data-testid={`cost-${c.action}`}>
                  <td>
                    <button type="button" className="link" onClick={() => setEditing(c)} aria-label={`Edit ${c.action}`}>
                      {c.action}
                    </button>
                  </td>
                  <td className="num">{fmtInt(c.credits)}</td>
                  <td>{c.description ?? <span className="muted">—</span>}</td>
                  <td>{fmtDate(c.updated_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          </div>
        )}
        <CostForm key={editing?.action ?? ''} editing={editing} onChanged={reloadBoth} />
      </section>

      <section aria-labelledby="tool-mappings">
        <h2 id="tool-mappings">Tool mappings</h2>
        <p className="muted small">A tool without a mapping is metered as platform_basic.</p>
        <MappingTable tools={tools.data?.tool_actions} error={tools.error} loading={tools.loading} onChanged={tools.reload} retry={tools.reload} />
        <MapForm actions={actions.map((c) => c.action)} onChanged={tools.reload} />
      </section>
    </>
  );
}

function CostForm({ editing, onChanged }: { editing: CreditCost | null; onChanged: () => void }) {
  const call = useOperator();
  const [action, setAction] = useState(editing?.action ?? '');
  const [credits, setCredits] = useState(editing ? String(editing.credits) : '');
  const [description, setDescription] = useState(editing?.description ?? '');
  const outcome = useOperatorAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await outcome.run(async () => {
      const answer = await call.PUT('/api/v1/admin/credit-costs/{action}', {
        params: { path: { action: segment(action.trim()) } },
        body: { credits: Number(credits), description: description.trim() || null },
      });
      onChanged();
      return `${answer.action} now costs ${countOf(answer.credits, 'credit')}.`;
    });
  };
  return (
    <form onSubmit={submit} aria-labelledby="set-cost">
      <h3 id="set-cost">Set a cost</h3>
      <p className="muted small">Choose an action in the table to change it, or name a new one.</p>
      <div className="inline-fields">
        <Field label="Action" hint="a–z, 0–9, _ . - (up to 100)">
          <input required pattern="[a-z0-9_.\-]{1,100}" maxLength={100} value={action} onChange={(e) => setAction(e.target.value)} />
        </Field>
        <Field label="Credits">
          <input type="number" required min={0} max={1_000_000} step={1} value={credits} onChange={(e) => setCredits(e.target.value)} />
        </Field>
        <Field label="Description" hint="Empty clears it">
          <input maxLength={500} value={description} onChange={(e) => setDescription(e.target.value)} />
        </Field>
      </div>
      <button type="submit" disabled={outcome.busy}>
        Set cost
      </button>
      <Outcome action={outcome} />
    </form>
  );
}

function MappingTable({
  tools,
  error,
  loading,
  onChanged,
  retry,
}: {
  tools: ToolAction[] | undefined;
  error: unknown;
  loading: boolean;
  onChanged: () => void;
  retry: () => void;
}) {
  const call = useOperator();
  const outcome = useOperatorAction();
  const unmap = (tool: string) =>
    outcome.run(async () => {
      await call.DELETE('/api/v1/admin/tool-actions/{tool_name}', { params: { path: { tool_name: segment(tool) } } });
      onChanged();
      return `${tool} is unmapped: it is metered as platform_basic.`;
    });
  if (error) return <OperatorError error={error} retry={retry} what="tool mappings" busy={loading} />;
  if (!tools) return loading ? <Loading what="tool mappings" shape="table" /> : null;
  return (
    <>
      <Outcome action={outcome} />
      {tools.length === 0 ? (
        <p className="muted">No tool is mapped yet.</p>
      ) : (
        <div className="table-scroll">
        <table aria-label="Tool mappings" data-testid="tool-mappings">
          <thead>
            <tr>
              <th scope="col">Tool</th>
              <th scope="col">Action</th>
              <th scope="col" className="num">
                Credits
              </th>
              <th scope="col">Updated</th>
              <th scope="col">
                <span className="visually-hidden">Remove</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {tools.map((t) => (
              <tr key={t.tool_name} data-testid={`tool-${t.tool_name}`}>
                <td>
                  <code>{t.tool_name}</code>
                </td>
                <td>{t.action}</td>
                <td className="num">{fmtInt(t.credits)}</td>
                <td>{fmtDate(t.updated_at)}</td>
                <td>
                  <ConfirmButton
                    label="Unmap"
                    confirmLabel={`Unmap ${t.tool_name}`}
                    disabled={outcome.busy}
                    onConfirm={async () => {
                      await unmap(t.tool_name);
                    }}
                  />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        </div>
      )}
    </>
  );
}

function MapForm({ actions, onChanged }: { actions: string[]; onChanged: () => void }) {
  const call = useOperator();
  const [tool, setTool] = useState('');
  const [action, setAction] = useState('');
  const outcome = useOperatorAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await outcome.run(async () => {
      const answer = await call.PUT('/api/v1/admin/tool-actions/{tool_name}', { params: { path: { tool_name: segment(tool.trim()) } }, body: { action } });
      setTool('');
      onChanged();
      return `${answer.tool_name} is now metered as ${answer.action}.`;
    });
  };
  return (
    <form onSubmit={submit} aria-labelledby="map-tool">
      <h3 id="map-tool">Map a tool</h3>
      <div className="inline-fields">
        <Field label="Tool name">
          <input required maxLength={200} value={tool} onChange={(e) => setTool(e.target.value)} />
        </Field>
        <Field label="Metered as action">
          <select required value={action} onChange={(e) => setAction(e.target.value)}>
            <option value="">Choose an action</option>
            {actions.map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
        </Field>
      </div>
      <button type="submit" disabled={outcome.busy}>
        Map tool
      </button>
      <Outcome action={outcome} />
    </form>
  );
}
