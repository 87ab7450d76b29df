import { useCallback, useEffect, useState } from 'react';
import { api } from './api';
import { useSession, useUser } from './session';
import { ErrorNote, useAction } from './ui';

/**
 * For a signed-in user whose address is not verified (docs/console.md "Email verification"): says so,
 * mails a fresh link (POST /auth/resend-verification) and checks again (GET /auth/me), also whenever
 * the tab regains focus, since the link is usually opened in another tab.
 */
export function VerifyNotice() {
  const user = useUser();
  const { updateUser } = useSession();
  const action = useAction();
  const [note, setNote] = useState<string | null>(null);
  const unverified = !user.email_verified;

  const check = useCallback(async () => {
    const fresh = await api.GET('/auth/me');
    updateUser(fresh);
    return fresh.email_verified;
  }, [updateUser]);

  useEffect(() => {
    if (!unverified) return;
    const onFocus = () => void check().catch(() => undefined);
    window.addEventListener('focus', onFocus);
    return () => window.removeEventListener('focus', onFocus);
  }, [unverified, check]);

  if (!unverified) return null;
  const resend = () =>
    action.run(async () => {
      setNote(null);
      const sent = await api.POST('/auth/resend-verification');
      setNote(
        sent.email_delivery === 'outbox'
          ? `A new link is in the local outbox for ${sent.email} (this server sends no mail): the operator finds it under Operator → Mailbox.`
          : `A new link was mailed to ${sent.email}.`,
      );
    });
  const checkAgain = () =>
    action.run(async () => {
      setNote(null);
      if (!(await check())) setNote('Not verified yet: open the newest link we mailed you.');
    });

  return (
    <section className="notice" aria-label="Email verification">
      <p>
        <strong>Your email address {user.email} is not verified.</strong> Open the link we mailed you (valid 24 hours); until then you cannot
        accept invitations.
      </p>
      <div className="row">
        <button type="button" disabled={action.busy} onClick={() => void resend()}>
          Resend verification link
        </button>
        <button type="button" className="secondary" disabled={action.busy} onClick={() => void checkAgain()}>
          I opened the link: check again
        </button>
      </div>
      {note ? (
        <p className="muted" role="status">
          {note}
        </p>
      ) : null}
      <ErrorNote error={action.error} />
    </section>
  );
}
