import { type FormEvent, useCallback, useEffect, useState } from 'react';
import { api } from '../api';
import { webUrl } from '../links';
import { useOrg } from '../org';
import { countOf } from '../plural';
import type { Schemas } from '../types';
import { ConfirmButton, ErrorNote, Loading, LoadError, PageHeader, StatusNote, useAction, useLoad } from '../ui';
import { fieldErrorsOf, FormField, LocalTime } from './form-fields';
import { NoAccess } from './NotFound';
import { LoadMore, usePages } from './paging';

/** A template of the operator's catalogue (GET /templates, docs/templates.md). */
export type Template = Schemas['Template'];
/** A template deployment as /organizations/{id}/template-deployments answers it (docs/templates.md). */
export type TemplateDeployment = Schemas['TemplateDeployment'];
/**
 * POST …/template-deployments takes CreateTemplateDeploymentBody (src/modules/templates/schemas.ts); the
 * generated client types hold its answer's schema but not the route, which is outside the SDK.
 */
interface CreateBody {
  template_id: Template['id'];
  name: TemplateDeployment['name'];
  subdomain: TemplateDeployment['subdomain'];
  custom_domain?: TemplateDeployment['custom_domain'];
  config?: TemplateDeployment['config'];
}
type Verification = Schemas['DomainVerification'];

/** How often a deployment still on its way (pending, deploying) is read again while the page is open. */
const POLL_MS = 5_000;

interface Notice {
  tone: 'success' | 'failure' | 'neutral';
  text: string;
}

const onItsWay = (d: TemplateDeployment) => d.status === 'pending' || d.status === 'deploying';

/** Why a verification found nothing, in words (docs/templates.md, Custom domains). */
function verificationText(domain: string, result: Verification): Notice {
  if (result.verified) return { tone: 'success', text: `${domain} is verified: it is this deployment's alone now, and the provisioner is given it.` };
  const name = `_creditgate-challenge.${domain}`;
  switch (result.reason) {
    case 'dns_timeout':
      return { tone: 'failure', text: `${domain} is not verified yet: DNS did not answer within 5 seconds. Try again in a moment.` };
    case 'dns_error':
      return { tone: 'failure', text: `${domain} is not verified yet: the DNS lookup failed (the server refused or could not answer). Try again later.` };
    default:
      return {
        tone: 'failure',
        text: `${domain} is not verified yet: no TXT record at ${name} holds the challenge value. Publish the record shown, wait for DNS to pick it up, then verify again.`,
      };
  }
}

/**
 * An organization's template deployments (docs/templates.md): what was deployed from the operator's
 * templates, where, and how far its provisioning got; retry a failed one; prove a custom domain with
 * its DNS challenge. Every role reads (templates.read); owners and admins deploy, retry, verify and
 * delete (templates.manage).
 */
export function TemplateDeployments() {
  const { org, can } = useOrg();
  const id = org.id;
  const one = useCallback((tdId: string) => api.GET('/organizations/{id}/template-deployments/{tdId}', { params: { path: { id, tdId } } }), [id]);
  const readable = can('templates.read');
  const templates = useLoad(() => (readable ? api.GET('/templates') : Promise.resolve([])), [readable]);
  const load = useCallback(
    (cursor: string | null) => api.list('/organizations/{id}/template-deployments', { params: { path: { id }, query: { limit: 20, cursor: cursor ?? undefined } } }),
    [id],
  );
  const pages = usePages(load, [id]);
  const { items, setItems } = pages;
  const [creating, setCreating] = useState(false);
  const [notice, setNotice] = useState<Notice | null>(null);
  const action = useAction();
  const manage = can('templates.manage');

  // A deployment on its way is read again until it is active or failed (the worker provisions it).
  useEffect(() => {
    const due = items.filter(onItsWay);
    if (due.length === 0) return;
    const timer = setTimeout(() => {
      void Promise.all(due.map((d) => one(d.id).catch(() => d))).then((fresh) =>
        setItems((all) => all.map((d) => fresh.find((f) => f.id === d.id) ?? d)),
      );
    }, POLL_MS);
    return () => clearTimeout(timer);
  }, [items, one, setItems]);

  if (!readable) return <NoAccess what="template deployments" />;

  const replace = (d: TemplateDeployment) => setItems((all) => all.map((x) => (x.id === d.id ? d : x)));
  const templateName = (id: string) => templates.data?.find((t) => t.id === id)?.name ?? 'a template no longer offered';
  const retry = (d: TemplateDeployment) =>
    action.run(async () => {
      setNotice(null);
      replace(await api.POST('/organizations/{id}/template-deployments/{tdId}/retry', { params: { path: { id, tdId: d.id } } }));
      setNotice({ tone: 'neutral', text: `${d.name} is being provisioned again (a fresh round of 5 attempts).` });
    });
  const verify = (d: TemplateDeployment) =>
    action.run(async () => {
      setNotice(null);
      const domain = d.custom_domain ?? '';
      const result = await api.POST('/organizations/{id}/template-deployments/{tdId}/verify-domain', { params: { path: { id, tdId: d.id } } });
      replace(await one(d.id));
      setNotice(verificationText(domain, result));
    });
  const remove = (d: TemplateDeployment) =>
    action.run(async () => {
      setNotice(null);
      await api.DELETE('/organizations/{id}/template-deployments/{tdId}', { params: { path: { id, tdId: d.id } } });
      setItems((all) => all.filter((x) => x.id !== d.id));
      setNotice({ tone: 'success', text: `${d.name} is deleted; its subdomain is free again.` });
    });

  return (
    <>
      <PageHeader title="Template deployments">
        <button type="button" className="secondary" onClick={pages.reload} disabled={pages.loading}>
          Refresh
        </button>
        {manage && !creating ? (
          <button
            type="button"
            onClick={() => {
              setCreating(true);
              setNotice(null);
            }}
          >
            Deploy a template
          </button>
        ) : null}
      </PageHeader>
      <p className="muted">
        Templates are set up by the operator of this installation. A deployment gets its own subdomain and, optionally, your own domain once you prove
        you control it. It is provisioned in the background: pending, then deploying, then active (or failed after 5 attempts, when you can retry it).
      </p>
      {!manage ? <p className="muted">Your role can see template deployments; owners and admins deploy and manage them.</p> : null}

      {creating && manage ? (
        <NewDeployment
          orgId={id}
          templates={templates.data ?? []}
          templatesError={templates.error}
          retryTemplates={templates.reload}
          onDone={(created) => {
            setCreating(false);
            if (created) {
              setItems((all) => [created, ...all]);
              setNotice({ tone: 'success', text: `${created.name} is created and waits for the provisioner.` });
            }
          }}
        />
      ) : null}

      <section aria-labelledby="td-list">
        <h2 id="td-list">Deployments</h2>
        <LoadError error={pages.error} retry={pages.retry} what="template deployments" busy={pages.loading || pages.loadingMore} />
        <ErrorNote error={action.error} />
        {notice ? (
          <StatusNote tone={notice.tone} testId="td-notice">
            {notice.text}
          </StatusNote>
        ) : null}
        {pages.loading && items.length === 0 ? (
          <Loading what="template deployments" shape="table" rows={2} />
        ) : items.length === 0 ? (
          pages.error ? null : <p className="muted">No template deployments yet.</p>
        ) : (
          <>
            <div className="table-scroll">
              <table data-testid="template-deployments">
                <thead>
                  <tr>
                    <th scope="col">Deployment</th>
                    <th scope="col">Address</th>
                    <th scope="col">Status</th>
                    <th scope="col">Custom domain</th>
                    {manage ? <th scope="col">Actions</th> : null}
                  </tr>
                </thead>
                <tbody>
                  {items.map((d) => (
                    <tr key={d.id} data-td={d.id}>
                      <th scope="row">
                        {d.name}
                        <span className="muted small window-times">from {templateName(d.template_id)}</span>
                      </th>
                      <td>
                        <code>{d.subdomain}</code>
                        {d.deployment_url && webUrl(d.deployment_url) ? (
                          <span className="window-times">
                            <a href={webUrl(d.deployment_url) ?? undefined} target="_blank" rel="noreferrer noopener">
                              {d.deployment_url}
                            </a>
                          </span>
                        ) : null}
                      </td>
                      <td data-testid="td-status" data-status={d.status}>
                        <StatusText d={d} />
                      </td>
                      <td data-testid="td-domain" data-domain-status={d.custom_domain_status ?? ''}>
                        <DomainText d={d} />
                      </td>
                      {manage ? (
                        <td>
                          <span className="row">
                            {d.status === 'failed' ? (
                              <button type="button" onClick={() => void retry(d)} disabled={action.busy}>
                                Retry
                              </button>
                            ) : null}
                            {d.custom_domain && d.custom_domain_status === 'pending_verification' ? (
                              <button type="button" className="secondary" onClick={() => void verify(d)} disabled={action.busy}>
                                Verify domain
                              </button>
                            ) : null}
                            {d.status !== 'deploying' ? (
                              <ConfirmButton label="Delete" confirmLabel="Delete deployment" onConfirm={() => remove(d).then(() => undefined)} />
                            ) : null}
                          </span>
                        </td>
                      ) : null}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <LoadMore pages={pages} one="deployment" />
          </>
        )}
      </section>
    </>
  );
}

function StatusText({ d }: { d: TemplateDeployment }) {
  const badge = <span className={`badge status-${d.status}`}>{d.status}</span>;
  if (d.status === 'active') return badge;
  if (d.status === 'pending') {
    return (
      <>
        {badge} <span className="muted small window-times">waiting for the provisioner</span>
      </>
    );
  }
  if (d.status === 'failed') {
    return (
      <>
        {badge}
        <span className="small window-times">
          Failed after {countOf(d.attempts, 'attempt')}
          {d.last_error ? `: ${d.last_error}` : ''}.
        </span>
      </>
    );
  }
  return (
    <>
      {badge}
      {d.attempts > 0 ? (
        <span className="small window-times">
          Attempt {d.attempts} failed{d.last_error ? `: ${d.last_error}` : ''}; next try <LocalTime iso={d.next_attempt_at} />.
        </span>
      ) : (
        <span className="muted small window-times">being provisioned</span>
      )}
    </>
  );
}

function DomainText({ d }: { d: TemplateDeployment }) {
  if (d.custom_domain_status === 'lapsed' && !d.custom_domain) {
    return <span className="muted">Lapsed: the claim ended unverified (after 7 days, or another deployment verified the domain).</span>;
  }
  if (!d.custom_domain) return <span className="muted">none</span>;
  if (d.custom_domain_status === 'verified') {
    return (
      <>
        <code>{d.custom_domain}</code>
        <span className="small window-times">
          Verified <LocalTime iso={d.custom_domain_verified_at} />
        </span>
      </>
    );
  }
  const challenge = d.custom_domain_challenge;
  return (
    <>
      <code>{d.custom_domain}</code>
      <span className="small window-times">Waiting for verification: publish this DNS record, then verify. An unverified claim lapses after 7 days.</span>
      {challenge ? (
        <dl className="challenge small" data-testid="td-challenge">
          <dt>Type</dt>
          <dd>{challenge.type}</dd>
          <dt>Name</dt>
          <dd>
            <code>{challenge.name}</code>
          </dd>
          <dt>Value</dt>
          <dd>
            <code>{challenge.value}</code>
          </dd>
        </dl>
      ) : null}
    </>
  );
}

/** The config textarea's text as a JSON object, or the reason it is not one. */
function configOf(text: string): { config?: Record<string, unknown>; error?: string } {
  if (text.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { error: 'must be a JSON object, such as {"plan": "starter"}' };
    return { config: parsed as Record<string, unknown> };
  } catch {
    return { error: 'is not valid JSON' };
  }
}

function NewDeployment({
  orgId,
  templates,
  templatesError,
  retryTemplates,
  onDone,
}: {
  orgId: string;
  templates: Template[];
  templatesError: unknown;
  retryTemplates: () => void;
  onDone: (created: TemplateDeployment | null) => void;
}) {
  const [templateId, setTemplateId] = useState('');
  const [name, setName] = useState('');
  const [subdomain, setSubdomain] = useState('');
  const [domain, setDomain] = useState('');
  const [config, setConfig] = useState('');
  const [configError, setConfigError] = useState<string | null>(null);
  const action = useAction();
  const errors = fieldErrorsOf(action.error);
  const chosen = templates.find((t) => t.id === templateId);

  const submit = (e: FormEvent) => {
    e.preventDefault();
    const parsed = configOf(config);
    setConfigError(parsed.error ?? null);
    if (parsed.error) return;
    const body: CreateBody = { template_id: templateId, name: name.trim(), subdomain: subdomain.trim() };
    if (domain.trim()) body.custom_domain = domain.trim();
    if (parsed.config) body.config = parsed.config;
    void action.run(async () => onDone(await api.POST('/organizations/{id}/template-deployments', { params: { path: { id: orgId } }, body })));
  };

  return (
    <section aria-labelledby="new-td" className="panel">
      <h2 id="new-td">Deploy a template</h2>
      <LoadError error={templatesError} retry={retryTemplates} what="the templates" />
      {templates.length === 0 && !templatesError ? (
        <p className="muted">The operator of this installation has not published any templates yet.</p>
      ) : null}
      <form onSubmit={submit}>
        <div className="form-grid">
          <FormField label="Template" hint={chosen?.description ?? undefined} error={errors.template_id}>
            {(c) => (
              <select {...c} required value={templateId} onChange={(e) => setTemplateId(e.target.value)}>
                <option value="">Choose a template</option>
                {templates.map((t) => (
                  <option key={t.id} value={t.id}>
                    {t.name}
                    {t.category ? ` (${t.category})` : ''}
                  </option>
                ))}
              </select>
            )}
          </FormField>
          <FormField label="Name" error={errors.name}>
            {(c) => <input {...c} type="text" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} />}
          </FormField>
          <FormField label="Subdomain" hint="a-z, 0-9 and inner hyphens; unique on this installation, and it never changes" error={errors.subdomain}>
            {(c) => (
              <input {...c} type="text" required maxLength={63} autoCapitalize="none" spellCheck={false} value={subdomain} onChange={(e) => setSubdomain(e.target.value)} />
            )}
          </FormField>
          <FormField
            label="Custom domain (optional)"
            hint="Your own host name, such as app.example.com; your plan must include custom domains, and you prove it with a DNS record"
            error={errors.custom_domain}
          >
            {(c) => <input {...c} type="text" maxLength={253} autoCapitalize="none" spellCheck={false} value={domain} onChange={(e) => setDomain(e.target.value)} />}
          </FormField>
        </div>
        <FormField label="Configuration (optional)" hint="A JSON object handed to the provisioner" error={configError ?? errors.config}>
          {(c) => <textarea {...c} rows={3} spellCheck={false} value={config} onChange={(e) => setConfig(e.target.value)} placeholder='{"plan": "starter"}' />}
        </FormField>
        <ErrorNote error={action.error} />
        <span className="row">
          <button type="submit" disabled={action.busy || templates.length === 0}>
            Deploy
          </button>
          <button type="button" className="secondary" onClick={() => onDone(null)}>
            Cancel
          </button>
        </span>
      </form>
    </section>
  );
}
