import { type FormEvent, useCallback, useState } from 'react';
import { useLocation } from 'wouter';
import { api } from '../api';
import { absolute, useOrg } from '../org';
import { useUser } from '../session';
import { ConfirmButton, ErrorNote, Field, fmtDate, Loading, LoadError, PageHeader, SecretOnce, StatusNote, useAction } from '../ui';
import { LoadMore, type Pages, usePages } from './paging';
import type { Schemas } from '../types';

type Member = Schemas['Member'];

type Invitation = Schemas['Invitation'];

type CreatedInvitation = Invitation & { token: string; accept_url: string; email_delivery: 'smtp' | 'outbox' };

const ROLES = ['owner', 'admin', 'member', 'viewer'] as const;
type Role = (typeof ROLES)[number];
/** The console path (POST /organizations/{id}/users) invites as admin, member or viewer; owners are made by an owner's role change. */
const INVITE_ROLES = ['admin', 'member', 'viewer'] as const;

export function Members() {
  const { org, can, reload: reloadOrg } = useOrg();
  const me = useUser();
  const [, navigate] = useLocation();
  const id = org.id;
  const loadMembers = useCallback(
    (cursor: string | null) => api.list('/organizations/{id}/users', { params: { path: { id }, query: { limit: 50, cursor: cursor ?? undefined } } }),
    [id],
  );
  const loadInvitations = useCallback(
    (cursor: string | null) => api.list('/organizations/{id}/invitations', { params: { path: { id }, query: { limit: 50, cursor: cursor ?? undefined } } }),
    [id],
  );
  const members = usePages(loadMembers, [id]);
  const invitations = usePages(loadInvitations, [id]);
  const [invited, setInvited] = useState<CreatedInvitation | null>(null);
  const change = useAction();
  const isOwner = org.role === 'owner';
  // Acting on an owner (changing, making or removing one) needs an owner (docs/accounts.md); the server decides.
  const mayTouch = (m: Member) => m.role !== 'owner' || isOwner;

  const replaceMember = (updated: Member) => members.setItems((items) => items.map((x) => (x.user_id === updated.user_id ? updated : x)));

  return (
    <>
      <PageHeader title="Members" />
      <section aria-labelledby="members-heading">
        <h2 id="members-heading">Members</h2>
        <LoadError error={members.error} retry={members.retry} what="members" busy={members.loading || members.loadingMore} />
        <ErrorNote error={change.error} />
        {members.loading ? (
          <Loading what="members" shape="table" />
        ) : members.error && members.items.length === 0 ? null : (
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Email</th>
                <th scope="col">Role</th>
                <th scope="col">Joined</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {members.items.map((m) => {
                const self = m.user_id === me.id;
                return (
                  <tr key={m.user_id} data-testid={`member-${m.email}`}>
                    <td>
                      {m.full_name ?? '—'}
                      {self ? <span className="muted"> (you)</span> : null}
                    </td>
                    <td>{m.email}</td>
                    <td>
                      {can('members.update') && mayTouch(m) ? (
                        <RoleChange
                          member={m}
                          roles={isOwner ? ROLES : ROLES.filter((r) => r !== 'owner')}
                          onChange={(role) =>
                            change.run(async () => {
                              replaceMember(await api.PUT('/organizations/{id}/users/{userId}', { params: { path: { id, userId: m.user_id } }, body: { role } }));
                              // My own role changed: what the console shows and enables changes with it.
                              if (self) reloadOrg();
                            })
                          }
                        />
                      ) : (
                        m.role
                      )}
                    </td>
                    <td>{fmtDate(m.joined_at)}</td>
                    <td>
                      {self ? (
                        <ConfirmButton
                          label="Leave"
                          confirmLabel={`Leave ${org.name}`}
                          onConfirm={async () => {
                            if (await change.run(async () => {
                              await api.DELETE('/organizations/{id}/users/{userId}', { params: { path: { id, userId: m.user_id } } });
                            })) navigate(absolute('/'));
                          }}
                        />
                      ) : can('members.remove') && mayTouch(m) ? (
                        <ConfirmButton
                          label="Remove"
                          confirmLabel={`Remove ${m.email}`}
                          onConfirm={async () => {
                            await change.run(async () => {
                              await api.DELETE('/organizations/{id}/users/{userId}', { params: { path: { id, userId: m.user_id } } });
                              members.setItems((items) => items.filter((x) => x.user_id !== m.user_id));
                            });
                          }}
                        />
                      ) : null}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        )}
        {members.items.length > 0 ? <LoadMore pages={members} one="member" /> : null}
      </section>

      {can('members.invite') ? (
        <section aria-labelledby="invite-heading">
          <h2 id="invite-heading">Invite someone</h2>
          {invited ? (
            <>
              <StatusNote tone="success">
                {invited.email} is invited as {invited.role}.{' '}
                {invited.email_delivery === 'smtp' ? 'The invitation was mailed.' : 'No mail went out (no mail server): share the link yourself.'}
              </StatusNote>
              <SecretOnce label={`Invitation link for ${invited.email}`} value={invited.accept_url} onDone={() => setInvited(null)} />
            </>
          ) : (
            <Invite
              orgId={id}
              onInvited={(inv) => {
                setInvited(inv);
                // An address invited again replaces its pending invitation: read the list afresh.
                invitations.reload();
              }}
            />
          )}
        </section>
      ) : null}

      <section aria-labelledby="invitations-heading">
        <h2 id="invitations-heading">Pending invitations</h2>
        <InvitationList
          pages={invitations}
          canRevoke={can('members.invite')}
          onRevoke={async (inv) => {
            await api.DELETE('/organizations/{id}/invitations/{invitationId}', { params: { path: { id, invitationId: inv.id } } });
            invitations.setItems((items) => items.filter((x) => x.id !== inv.id));
          }}
        />
        {invitations.next ? <LoadMore pages={invitations} one="invitation" /> : null}
      </section>
    </>
  );
}

function RoleChange({ member, roles, onChange }: { member: Member; roles: readonly Role[]; onChange: (role: Role) => Promise<boolean> }) {
  const [role, setRole] = useState<string>(member.role);
  const [busy, setBusy] = useState(false);
  // Changing the select does nothing by itself (a keyboard user moves through the options): the button applies it.
  return (
    <span className="row">
      <label>
        <span className="visually-hidden">Role of {member.email}</span>
        <select value={role} onChange={(e) => setRole(e.target.value)}>
          {roles.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
      </label>
      <button
        type="button"
        className="secondary"
        disabled={busy || role === member.role}
        onClick={async () => {
          const chosen = roles.find((r) => r === role);
          if (!chosen) return;
          setBusy(true);
          const done = await onChange(chosen);
          setBusy(false);
          if (!done) setRole(member.role);
        }}
      >
        Change role
      </button>
    </span>
  );
}

function Invite({ orgId, onInvited }: { orgId: string; onInvited: (inv: CreatedInvitation) => void }) {
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<(typeof INVITE_ROLES)[number]>('member');
  const action = useAction();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const done = await action.run(async () => onInvited(await api.POST('/organizations/{id}/users', { params: { path: { id: orgId } }, body: { email: email.trim(), role } })));
    if (done) {
      setEmail('');
      setRole('member');
    }
  };
  return (
    <form onSubmit={submit} className="inline" aria-labelledby="invite-heading">
      <Field label="Email to invite">
        <input type="email" required maxLength={320} value={email} onChange={(e) => setEmail(e.target.value)} />
      </Field>
      <Field label="Invite as">
        <select value={role} onChange={(e) => setRole(e.target.value as (typeof INVITE_ROLES)[number])}>
          {INVITE_ROLES.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
      </Field>
      <button type="submit" disabled={action.busy}>
        Invite
      </button>
      <ErrorNote error={action.error} />
    </form>
  );
}

function InvitationList({ pages, canRevoke, onRevoke }: { pages: Pages<Invitation>; canRevoke: boolean; onRevoke: (inv: Invitation) => Promise<void> }) {
  const revoke = useAction();
  const items = pages.items;
  const failed = <LoadError error={pages.error} retry={pages.retry} what="invitations" busy={pages.loading || pages.loadingMore} />;
  if (pages.loading) return <Loading what="invitations" shape="table" rows={2} />;
  if (items.length === 0) return pages.error ? failed : <p className="muted">No pending invitations.</p>;
  return (
    <>
      {failed}
      <ErrorNote error={revoke.error} />
      <table>
        <thead>
          <tr>
            <th scope="col">Email</th>
            <th scope="col">Role</th>
            <th scope="col">Invited</th>
            <th scope="col">Expires</th>
            {canRevoke ? <th scope="col">Actions</th> : null}
          </tr>
        </thead>
        <tbody>
          {items.map((inv) => (
            <tr key={inv.id} data-testid={`invitation-${inv.email}`}>
              <td>{inv.email}</td>
              <td>{inv.role}</td>
              <td>{fmtDate(inv.created_at)}</td>
              <td>{fmtDate(inv.expires_at)}</td>
              {canRevoke ? (
                <td>
                  <ConfirmButton
                    label="Revoke"
                    confirmLabel={`Revoke the invitation of ${inv.email}`}
                    onConfirm={async () => {
                      await revoke.run(() => onRevoke(inv));
                    }}
                  />
                </td>
              ) : null}
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
