import { type FormEvent, useState } from 'react';
import { fmtDate, Field, Loading, PageHeader, useLoad } from '../../ui';
import type { Schemas } from '../../types';
import { adminPath, OperatorError, useOperator } from './common';

type MailboxMessage = Schemas['AdminMailboxMessage'];

interface MailboxReply {
  messages: MailboxMessage[];
  next_cursor: string | null;
}

const PAGE = 20;

/**
 * The local outbox (docs/console.md "Operator", Mailbox): without SMTP_URL mail is delivered here,
 * so the verification and invitation links of a fresh install are read and followed from this page.
 * Links open in a new tab (no referrer), as the recipient's mail client would open them.
 */
export function Mailbox() {
  const call = useOperator();
  const [typed, setTyped] = useState('');
  const [to, setTo] = useState('');
  const [round, setRound] = useState(0);
  const first = useLoad(() => call<MailboxReply>('GET', adminPath('/api/v1/admin/mailbox', { to, limit: PAGE })), [call, to, round]);
  // Further pages belong to the first page they continue (as in the organization search).
  const [more, setMore] = useState<{ after: MailboxReply | undefined; messages: MailboxMessage[]; next: string | null; error: unknown; busy: boolean }>({
    after: undefined,
    messages: [],
    next: null,
    error: null,
    busy: false,
  });
  const extra = more.after === first.data ? more : { after: first.data, messages: [], next: first.data?.next_cursor ?? null, error: null, busy: false };
  const messages = [...(first.data?.messages ?? []), ...extra.messages];
  const showMore = async () => {
    if (!extra.next) return;
    const base = { ...extra, busy: false };
    setMore({ ...base, busy: true, error: null });
    try {
      const page = await call<MailboxReply>('GET', adminPath('/api/v1/admin/mailbox', { to, limit: PAGE, cursor: extra.next }));
      setMore({ ...base, messages: [...base.messages, ...page.messages], next: page.next_cursor, error: null });
    } catch (error) {
      setMore({ ...base, error });
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setTo(typed.trim());
    setRound((r) => r + 1);
  };

  return (
    <>
      <PageHeader title="Mailbox">
        <button type="button" className="secondary" disabled={first.loading} onClick={() => setRound((r) => r + 1)}>
          Refresh
        </button>
      </PageHeader>
      <p className="muted">
        Without <code>SMTP_URL</code> mail stays in the local outbox: here are its messages, newest first, with their links (verification and
        invitation links hold their token: follow one as its recipient would). Organization users never see this page.
      </p>
      <search>
        <form className="inline" onSubmit={submit}>
          <Field label="Recipient">
            <input type="search" maxLength={320} size={40} value={typed} onChange={(e) => setTyped(e.target.value)} placeholder="ada@example.com" />
          </Field>
          <button type="submit" disabled={first.loading}>
            Show
          </button>
        </form>
      </search>
      <OperatorError error={first.error} />
      {first.loading && !first.data ? <Loading /> : null}
      {first.data ? (
        messages.length === 0 ? (
          <p className="muted" role="status">
            No message{to ? <> to {to}</> : null}.
          </p>
        ) : (
          <table aria-label="Messages" data-testid="mailbox-messages">
            <thead>
              <tr>
                <th scope="col">To</th>
                <th scope="col">Subject</th>
                <th scope="col">Links</th>
                <th scope="col">Queued</th>
                <th scope="col">Status</th>
              </tr>
            </thead>
            <tbody>
              {messages.map((m) => (
                <tr key={m.id} data-testid={`mail-${m.id}`}>
                  <td>{m.to}</td>
                  <td>{m.subject}</td>
                  <td>
                    {m.text === null ? (
                      <span className="muted">cannot be decrypted with this ENCRYPTION_KEY</span>
                    ) : m.links.length === 0 ? (
                      <span className="muted">none</span>
                    ) : (
                      <ul className="plain">
                        {m.links.map((link) => (
                          <li key={link}>
                            <a href={link} target="_blank" rel="noreferrer noopener">
                              {linkLabel(m.template)}
                            </a>{' '}
                            <code className="small">{shortLink(link)}</code>
                          </li>
                        ))}
                      </ul>
                    )}
                  </td>
                  <td>{fmtDate(m.created_at)}</td>
                  <td>{m.status === 'sent' ? `Sent ${fmtDate(m.sent_at)}` : 'In the outbox'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      ) : null}
      <OperatorError error={extra.error} />
      {extra.next ? (
        <p>
          <button type="button" className="secondary" disabled={extra.busy} onClick={() => void showMore()}>
            Show more
          </button>
        </p>
      ) : null}
    </>
  );
}

function linkLabel(template: string): string {
  if (template === 'verify_email') return 'Open the verification link';
  if (template === 'invitation') return 'Open the invitation';
  return 'Open the link';
}

/** Where the link goes, without its token (the fragment, and a path segment holding one): the token stays in the href only. */
function shortLink(link: string): string {
  try {
    const url = new URL(link);
    const path = url.pathname.replace(/\/(cg[a-z]*_)[^/]+/g, '/$1…');
    return `${url.origin}${path}${url.hash ? '#…' : ''}`;
  } catch {
    return link.slice(0, 40);
  }
}
