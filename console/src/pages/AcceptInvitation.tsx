import { useState } from 'react';
import { useLocation } from 'wouter';
import { api } from '../api';
import { errorOf } from '../api-errors';
import { absolute, orgPath } from '../org';
import { useSession } from '../session';
import { ErrorNote, fmtDate, Loading, LoadError, PageHeader, useAction, useLoad } from '../ui';
import { SignIn, SignUp } from './SignIn';
import type { Schemas } from '../types';
import { VerifyNotice } from '../VerifyNotice';

type InvitationView = Schemas['PublicInvitation'];

/** `/console/invitations/{token}`: what the invitation is for (no sign-in needed), then sign in or up and accept. */
export function AcceptInvitation({ token }: { token: string }) {
  const { state } = useSession();
  const [, navigate] = useLocation();
  const [mode, setMode] = useState<'in' | 'up'>('in');
  const invitation = useLoad(async () => {
    // Without the signed-in call's refresh and retry: the invitation is read before anyone signs in.
    const res = await fetch(`/invitations/${encodeURIComponent(token)}`, { headers: { accept: 'application/json' } });
    if (!res.ok) throw await errorOf(res);
    return ((await res.json()) as { data: InvitationView }).data;
  }, [token]);
  const action = useAction();
  if (invitation.error) {
    return (
      <main className="auth-card">
        <LoadError error={invitation.error} retry={invitation.reload} what="the invitation" page busy={invitation.loading} />
      </main>
    );
  }
  if (!invitation.data || state.status === 'loading') return <Loading what="the invitation" />;
  const inv = invitation.data;
  const what = (
    <>
      <PageHeader title={`Join ${inv.organization_name}`} />
      <p>
        You are invited as <strong>{inv.role}</strong>
        {inv.inviter ? ` by ${inv.inviter.name ?? inv.inviter.email}` : ''}, as {inv.email}. The invitation expires {fmtDate(inv.expires_at)} ({inv.status}).
      </p>
    </>
  );
  if (state.status !== 'signed-in') {
    // SignIn and SignUp are pages with their own <main>: the invitation goes in a region above them, not around them.
    return (
      <>
        <section className="auth-card" aria-label="Invitation">
          {what}
          <button type="button" className="link" onClick={() => setMode(mode === 'in' ? 'up' : 'in')}>
            {mode === 'in' ? 'New here? Create an account with the invited address' : 'I have an account: sign in'}
          </button>
        </section>
        {/* After signing in or up here the user stays on this page to accept (the session state re-renders it). */}
        {mode === 'in' ? <SignIn /> : <SignUp email={inv.email} />}
      </>
    );
  }
  return (
    <main className="auth-card">
      {what}
      <p>Signed in as {state.user.email}.</p>
      <VerifyNotice />
      <ErrorNote error={action.error} />
      <button
        type="button"
        disabled={action.busy}
        onClick={() =>
          void action.run(async () => {
            const joined = await api.POST('/invitations/{token}/accept', { params: { path: { token } } });
            navigate(absolute(orgPath(joined.organization_id)));
          })
        }
      >
        Accept invitation
      </button>
    </main>
  );
}
