import { type FormEvent, useState } from 'react';
import { useLocation } from 'wouter';
import { api } from '../api';
import { absolute, orgPath } from '../org';
import type { Schemas } from '../types';
import { ErrorNote, Field, PageHeader, SecretOnce, useAction } from '../ui';


const slugOf = (name: string) =>
  name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63);

export function NewOrganization() {
  const [, navigate] = useLocation();
  const [name, setName] = useState('');
  const [slug, setSlug] = useState('');
  const [created, setCreated] = useState<Schemas['OrganizationCreated'] | null>(null);
  const action = useAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await action.run(async () => setCreated(await api.POST('/organizations', { body: { name, slug: slug || slugOf(name) } })));
  };
  if (created) {
    return (
      <>
        <PageHeader title={`${created.name} is ready`} />
        <p>Its primary deployment was created. MCP servers in service mode authenticate with its secret:</p>
        <SecretOnce label="Deployment secret" value={created.deployment.secret} onDone={() => navigate(absolute(orgPath(created.id)))} />
      </>
    );
  }
  return (
    <>
      <PageHeader title="New organization" />
      <form onSubmit={submit} className="narrow">
        <Field label="Name">
          <input required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} />
        </Field>
        <Field label="Slug" hint="Lowercase letters, digits and dashes; unique">
          <input value={slug} placeholder={slugOf(name)} onChange={(e) => setSlug(e.target.value)} />
        </Field>
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          Create organization
        </button>
      </form>
    </>
  );
}
