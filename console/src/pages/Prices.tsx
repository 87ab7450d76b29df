import { api } from '../api';
import { useOrg } from '../org';
import { countOf } from '../plural';
import { fmtInt, Loading, LoadError, PageHeader, useLoad } from '../ui';
import { NoAccess } from './NotFound';
import './extra.css';

/** A tool with no mapping is metered as this action (docs/metering.md, Prices up front). */
const DEFAULT_ACTION = 'platform_basic';


const perCall = (credits: number) => countOf(credits, 'credit');

/**
 * The platform's price list (docs/metering.md, Prices up front): what each mapped tool costs per call,
 * then every action with its credits and description. Every role reads it (organization.read).
 */
export function Prices() {
  const { org, can } = useOrg();
  const prices = useLoad(() => api.GET('/organizations/{id}/credit-costs', { params: { path: { id: org.id } } }), [org.id]);

  if (!can('organization.read')) return <NoAccess what="prices" />;

  const data = prices.data;
  const creditsOf = new Map((data?.costs ?? []).map((c) => [c.action, c.credits]));
  const basic = creditsOf.get(DEFAULT_ACTION);

  return (
    <>
      <PageHeader title="Prices">
        <button type="button" className="secondary" onClick={prices.reload} disabled={prices.loading}>
          Refresh
        </button>
      </PageHeader>
      <p className="muted">
        What a metered call costs, as the operator set it for every organization. Each tool is metered as an action, and the action&apos;s credits are
        deducted per call.
      </p>
      <LoadError error={prices.error} retry={prices.reload} what="prices" busy={prices.loading} />

      <section aria-labelledby="price-tools">
        <h2 id="price-tools">Tools</h2>
        <p className="muted" data-testid="default-price">
          A tool not listed here is metered as <code>{DEFAULT_ACTION}</code>
          {basic !== undefined ? <>, at {perCall(basic)} per call</> : null}.
        </p>
        {!data ? (
          prices.error ? null : <Loading what="tool prices" shape="table" rows={3} />
        ) : data.tools.length === 0 ? (
          <p className="muted">No tool has its own action: every tool is metered as {DEFAULT_ACTION}.</p>
        ) : (
          <div className="table-scroll">
            <table data-testid="tool-prices">
              <caption className="visually-hidden">{countOf(data.tools.length, 'tool')} and what each call costs</caption>
              <thead>
                <tr>
                  <th scope="col">Tool</th>
                  <th scope="col">Action</th>
                  <th scope="col" className="num">
                    Credits per call
                  </th>
                </tr>
              </thead>
              <tbody>
                {data.tools.map((t) => (
                  <tr key={t.tool_name} data-tool={t.tool_name}>
                    <th scope="row" className="wrap-anywhere">
                      <code>{t.tool_name}</code>
                    </th>
                    <td className="wrap-anywhere">
                      <code>{t.action}</code>
                    </td>
                    <td className="num">{fmtInt(creditsOf.get(t.action))}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <section aria-labelledby="price-actions">
        <h2 id="price-actions">Actions</h2>
        {!data ? (
          prices.error ? null : <Loading what="action prices" shape="table" rows={3} />
        ) : data.costs.length === 0 ? (
          <p className="muted">No action has a price yet.</p>
        ) : (
          <div className="table-scroll">
            <table data-testid="action-prices">
              <caption className="visually-hidden">{countOf(data.costs.length, 'action')} with their credits per call</caption>
              <thead>
                <tr>
                  <th scope="col">Action</th>
                  <th scope="col" className="num">
                    Credits per call
                  </th>
                  <th scope="col">Description</th>
                </tr>
              </thead>
              <tbody>
                {data.costs.map((c) => (
                  <tr key={c.action} data-action={c.action}>
                    <th scope="row" className="wrap-anywhere">
                      <code>{c.action}</code>
                    </th>
                    <td className="num">{fmtInt(c.credits)}</td>
                    <td className="wrap-anywhere">{c.description ?? <span className="muted">—</span>}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}
