import { type FormEvent, useCallback, useState } from 'react';
import { api } from '../api';
import { useOrg } from '../org';
import { CheckLabel, ConfirmButton, ErrorNote, Field, fmtDate, Loading, LoadError, PageHeader, SecretOnce, useAction } from '../ui';
import { LoadMore, usePages } from './paging';
import type { Schemas } from '../types';

export type ApiKey = Schemas['ApiKey'];

type Scope = 'read' | 'write' | 'admin';
type CreatedKey = ApiKey & { key: string };

const SCOPES: Array<{ scope: Scope; hint: string }> = [
  { scope: 'read', hint: 'GET routes: usage, balances, entitlements' },
  { scope: 'write', hint: 'everything else: recording usage, rotating secrets' },
  { scope: 'admin', hint: 'members, keys, billing, webhooks and the audit log' },
];


/** The day after `day` (YYYY-MM-DD) at 00:00 UTC: a key "expiring on" a day works through that whole day, UTC. */
const endOfDayUtc = (day: string) => new Date(Date.parse(`${day}T00:00:00.000Z`) + 86_400_000).toISOString();
const todayUtc = () => new Date().toISOString().slice(0, 10);

function stateOf(k: ApiKey): string {
  if (k.revoked_at) return `Revoked ${fmtDate(k.revoked_at)}`;
  if (k.expires_at && Date.parse(k.expires_at) <= Date.now()) return 'Expired';
  return 'Active';
}

export function ApiKeys() {
  const { org, can } = useOrg();
  const manage = can('api_keys.manage');
  const load = useCallback((cursor: string | null) => api.list('/organizations/{id}/api-keys', { params: { path: { id: org.id }, query: { limit: 20, cursor: cursor ?? undefined } } }), [org.id]);
  const keys = usePages(load, [org.id]);
  const [created, setCreated] = useState<CreatedKey | null>(null);
  const revoke = useAction();

  return (
    <>
      <PageHeader title="API keys" />
      <p className="muted">
        An API key acts for {org.name} with its scopes: send it as <code>X-API-Key</code> or <code>Authorization: Bearer</code>. MCP
        servers in stdio mode record usage with a key holding the <code>write</code> scope.
      </p>
      {created ? (
        <SecretOnce label={`API key "${created.name}"`} value={created.key} onDone={() => setCreated(null)} />
      ) : manage ? (
        <CreateKey
          orgId={org.id}
          offerAdmin={org.role === 'owner' || org.role === 'admin'}
          onCreated={(k) => {
            // The list shows the key without its secret; the secret stays only in the box above until "Done".
            const { key: _secret, ...shown } = k;
            keys.setItems((items) => [shown, ...items]);
            setCreated(k);
          }}
        />
      ) : null}

      <section aria-labelledby="keys-heading">
        <h2 id="keys-heading">Keys</h2>
        <LoadError error={keys.error} retry={keys.retry} what="API keys" busy={keys.loading || keys.loadingMore} />
        <ErrorNote error={revoke.error} />
        {keys.loading ? (
          <Loading what="API keys" shape="table" />
        ) : keys.error && keys.items.length === 0 ? null : keys.items.length === 0 ? (
          <p className="muted">No API keys yet.</p>
        ) : (
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">Expires</th>
                <th scope="col">State</th>
                {manage ? <th scope="col">Actions</th> : null}
              </tr>
            </thead>
            <tbody>
              {keys.items.map((k) => (
                <tr key={k.id} data-testid={`key-${k.id}`}>
                  <td>{k.name}</td>
                  <td>
                    <code>{k.key_prefix}…</code>
                  </td>
                  <td>{k.scopes.join(', ')}</td>
                  <td>{fmtDate(k.created_at)}</td>
                  <td>{k.last_used_at ? fmtDate(k.last_used_at) : 'Never'}</td>
                  <td>{k.expires_at ? fmtDate(k.expires_at) : 'Never'}</td>
                  <td>{stateOf(k)}</td>
                  {manage ? (
                    <td>
                      {k.revoked_at ? null : (
                        <ConfirmButton
                          label="Revoke"
                          confirmLabel={`Revoke "${k.name}" now`}
                          onConfirm={async () => {
                            await revoke.run(async () => {
                              const revoked = await api.DELETE('/organizations/{id}/api-keys/{keyId}', { params: { path: { id: org.id, keyId: k.id } } });
                              keys.setItems((items) => items.map((x) => (x.id === revoked.id ? revoked : x)));
                            });
                          }}
                        />
                      )}
                    </td>
                  ) : null}
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {keys.items.length > 0 ? <LoadMore pages={keys} one="key" /> : null}
      </section>
    </>
  );
}

function CreateKey({ orgId, offerAdmin, onCreated }: { orgId: string; offerAdmin: boolean; onCreated: (k: CreatedKey) => void }) {
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<Scope[]>(['read']);
  const [expiry, setExpiry] = useState('');
  const [missingScope, setMissingScope] = useState(false);
  const action = useAction();
  const offered = SCOPES.filter((s) => s.scope !== 'admin' || offerAdmin);
  const toggle = (scope: Scope, on: boolean) => {
    setMissingScope(false);
    setScopes((now) => (on ? [...now.filter((s) => s !== scope), scope] : now.filter((s) => s !== scope)));
  };
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (scopes.length === 0) {
      setMissingScope(true);
      return;
    }
    const done = await action.run(async () => {
      const body = { name: name.trim(), scopes, ...(expiry ? { expires_at: endOfDayUtc(expiry) } : {}) };
      onCreated(await api.POST('/organizations/{id}/api-keys', { params: { path: { id: orgId } }, body }));
    });
    if (done) {
      setName('');
      setScopes(['read']);
      setExpiry('');
    }
  };
  return (
    <section aria-labelledby="create-key-heading">
      <h2 id="create-key-heading">Create a key</h2>
      <form onSubmit={submit} className="narrow">
        <Field label="Name" hint="To recognise the key by, e.g. where it is used">
          <input required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} />
        </Field>
        <fieldset className="field">
          <legend>Scopes</legend>
          {offered.map(({ scope, hint }) => (
            <CheckLabel key={scope} checked={scopes.includes(scope)} onChange={(on) => toggle(scope, on)}>
              <code>{scope}</code> <span className="muted small">— {hint}</span>
            </CheckLabel>
          ))}
        </fieldset>
        {missingScope ? (
          <p className="error" role="alert">
            Choose at least one scope.
          </p>
        ) : null}
        <Field label="Expires on (optional)" hint="The key works through this day (UTC); empty means it never expires">
          <input type="date" min={todayUtc()} value={expiry} onChange={(e) => setExpiry(e.target.value)} />
        </Field>
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          Create key
        </button>
      </form>
    </section>
  );
}
