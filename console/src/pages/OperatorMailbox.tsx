import { type FormEvent, useMemo, useState } from 'react';
import { Link } from 'wouter';
import { Field, PageHeader } from '../ui';
import { callWith, OperatorError, OperatorProvider, useOperatorAction } from './operator/common';
import { MailboxReader } from './operator/MailboxReader';

/**
 * The operator's mailbox on its own address, `/console/operator/mailbox` (docs/console.md "Operator"):
 * a link to hand to whoever reads a fresh install's mail. The operator key is typed here and held
 * in this component's state only, as on the operator page: never web storage, never the URL; Lock,
 * a reload or leaving the page forgets it.
 */
export function OperatorMailbox() {
  const [adminKey, setAdminKey] = useState<string | null>(null);
  const call = useMemo(() => (adminKey ? callWith(adminKey) : null), [adminKey]);
  if (!call) return <Unlock onUnlock={setAdminKey} />;
  return (
    <OperatorProvider value={call}>
      <div className="shell">
        <header className="topbar">
          <span className="brand">creditgate operator</span>
          <nav aria-label="Operator" className="operator-tabs">
            <Link href="/operator">All operator pages</Link>
          </nav>
          <span className="spacer" />
          <button type="button" className="secondary" onClick={() => setAdminKey(null)}>
            Lock
          </button>
        </header>
        <main>
          <MailboxReader />
        </main>
      </div>
    </OperatorProvider>
  );
}

/** The key is checked with one operator call before the mailbox opens: a wrong key shows the API's 401. */
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
      <PageHeader title="Operator mailbox" />
      <p className="muted">
        The operator key (<code>ADMIN_API_KEY</code>) unlocks the local mailbox. It stays in this tab's memory only: a reload, leaving the page or Lock
        forgets it. Every read is audited.
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
