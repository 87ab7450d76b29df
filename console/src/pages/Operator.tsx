import { type FormEvent, useMemo, useState } from 'react';
import { Field, PageHeader } from '../ui';
import { callWith, OperatorError, OperatorProvider, useOperatorAction } from './operator/common';
import { CostTables } from './operator/CostTables';
import { MailboxReader as Mailbox } from './operator/MailboxReader';
import { Organizations } from './operator/Organizations';

type View = 'organizations' | 'costs' | 'mailbox';

/**
 * The operator page (docs/console.md "Operator"), outside any user session: the operator key is typed
 * here and held in this component's state only — this tab's memory, never web storage, never the URL.
 * Lock (or leaving the page) forgets it.
 */
export function Operator() {
  const [adminKey, setAdminKey] = useState<string | null>(null);
  const [view, setView] = useState<View>('organizations');
  const call = useMemo(() => (adminKey ? callWith(adminKey) : null), [adminKey]);
  if (!call) return <Unlock onUnlock={setAdminKey} />;
  return (
    <OperatorProvider value={call}>
      <div className="shell">
        <header className="topbar">
          <span className="brand">creditgate operator</span>
          <nav aria-label="Operator" className="operator-tabs">
            <button type="button" className="secondary" aria-current={view === 'organizations' ? 'page' : undefined} onClick={() => setView('organizations')}>
              Organizations
            </button>
            <button type="button" className="secondary" aria-current={view === 'costs' ? 'page' : undefined} onClick={() => setView('costs')}>
              Costs and tools
            </button>
            <button type="button" className="secondary" aria-current={view === 'mailbox' ? 'page' : undefined} onClick={() => setView('mailbox')}>
              Mailbox
            </button>
          </nav>
          <span className="spacer" />
          <button type="button" className="secondary" onClick={() => setAdminKey(null)}>
            Lock
          </button>
        </header>
        <main>{view === 'organizations' ? <Organizations /> : view === 'costs' ? <CostTables /> : <Mailbox />}</main>
      </div>
    </OperatorProvider>
  );
}

/** The key is checked with one operator call before the page opens: a wrong key shows the API's 401. */
function Unlock({ onUnlock }: { onUnlock: (key: string) => void }) {
  const [key, setKey] = useState('');
  const action = useOperatorAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const typed = key;
    if (
      await action.run(async () => {
        await callWith(typed).GET('/api/v1/admin/organizations', { params: { query: { limit: 1 } } });
        return 'Unlocked';
      })
    ) {
      onUnlock(typed);
    }
  };
  return (
    <main className="auth-card">
      <PageHeader title="Operator" />
      <p className="muted">
        The operator key (<code>ADMIN_API_KEY</code>) unlocks this page. It stays in this tab's memory only: a reload, leaving the page or
        Lock forgets it. Every operator call is audited.
      </p>
      <form onSubmit={submit}>
        <Field label="Operator key">
          <input type="password" autoComplete="off" spellCheck={false} required value={key} onChange={(e) => setKey(e.target.value)} />
        </Field>
        <OperatorError error={action.error} />
        <button type="submit" disabled={action.busy}>
          Unlock
        </button>
      </form>
    </main>
  );
}
