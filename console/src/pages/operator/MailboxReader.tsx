import { type FormEvent, type ReactNode, useEffect, useRef, useState } from 'react';
import type { Schemas } from '../../types';
import { Field, Loading, PageHeader, useLoad } from '../../ui';
import { LocalTime } from '../form-fields';
import { OperatorError, useOperator } from './common';

type MailboxMessage = Schemas['AdminMailboxMessage'];

interface MailboxReply {
  messages: MailboxMessage[];
  next_cursor: string | null;
}

const PAGE = 20;

/**
 * The operator's mailbox (docs/accounts.md "The local mailbox", docs/console.md "Operator"): without
 * SMTP_URL, outside production, mail is delivered to the local outbox. The messages newest first, for
 * one recipient if asked, with their links; Open shows one message whole: its body as the recipient
 * would read it. Links open in a new tab without a referrer, as a mail client would open them.
 */
export function MailboxReader() {
  const call = useOperator();
  const [typed, setTyped] = useState('');
  const [to, setTo] = useState('');
  const [round, setRound] = useState(0);
  const [openId, setOpenId] = useState<string | null>(null);
  const first = useLoad(() => call.GET('/api/v1/admin/mailbox', { params: { query: { to, limit: PAGE } } }), [call, to, round]);
  // Further pages belong to the first page they continue.
  const [more, setMore] = useState<{ after: MailboxReply | undefined; messages: MailboxMessage[]; next: string | null; error: unknown; busy: boolean }>({
    after: undefined,
    messages: [],
    next: null,
    error: null,
    busy: false,
  });
  const extra = more.after === first.data ? more : { after: first.data, messages: [], next: first.data?.next_cursor ?? null, error: null, busy: false };
  const messages = [...(first.data?.messages ?? []), ...extra.messages];
  const opened = messages.find((m) => m.id === openId) ?? null;

  const showMore = async () => {
    if (!extra.next) return;
    const base = { ...extra, busy: false };
    setMore({ ...base, busy: true, error: null });
    try {
      const page = await call.GET('/api/v1/admin/mailbox', { params: { query: { to, limit: PAGE, cursor: extra.next } } });
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
        Without <code>SMTP_URL</code> mail stays in the local outbox: here are its messages, newest first. Open one to read it as its recipient would;
        verification and invitation links hold their token, so follow one only as that recipient. Organization users never see this page, and every
        read is audited.
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
      <OperatorError error={first.error} retry={first.reload} what="the mailbox" busy={first.loading} />
      {first.loading && !first.data && !first.error ? <Loading what="the mailbox" shape="table" /> : null}
      {first.data ? (
        messages.length === 0 ? (
          <p className="muted" role="status">
            No message{to ? <> to {to}</> : null}.
          </p>
        ) : (
          <div className="table-scroll">
            <table aria-label="Messages" data-testid="mailbox-messages">
              <thead>
                <tr>
                  <th scope="col">To</th>
                  <th scope="col">Subject</th>
                  <th scope="col">Links</th>
                  <th scope="col">Queued</th>
                  <th scope="col">Status</th>
                  <th scope="col">Message</th>
                </tr>
              </thead>
              <tbody>
                {messages.map((m) => (
                  <tr key={m.id} data-testid={`mail-${m.id}`} aria-current={m.id === openId ? 'true' : undefined}>
                    <td>{m.to}</td>
                    <td>{m.subject}</td>
                    <td>
                      <MailLinks message={m} />
                    </td>
                    <td>
                      <LocalTime iso={m.created_at} />
                    </td>
                    <td>{m.status === 'sent' ? 'Sent' : 'In the outbox'}</td>
                    <td>
                      {/* The name says which message; a visually hidden span would escape the table's scrolling box on a phone. */}
                      <button
                        type="button"
                        className="secondary"
                        aria-label={`${m.id === openId ? 'Close' : 'Open'} “${m.subject}” to ${m.to}`}
                        aria-controls="mail-open"
                        aria-expanded={m.id === openId}
                        onClick={() => setOpenId(m.id === openId ? null : m.id)}
                      >
                        {m.id === openId ? 'Close' : 'Open'}
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
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
      {opened ? <OpenMail key={opened.id} message={opened} onClose={() => setOpenId(null)} /> : null}
    </>
  );
}

/** One message whole: who it went to, when, and its body with its links followable. Focus moves to it when opened. */
function OpenMail({ message: m, onClose }: { message: MailboxMessage; onClose: () => void }) {
  const ref = useRef<HTMLElement>(null);
  useEffect(() => {
    ref.current?.focus();
  }, []);
  return (
    <article id="mail-open" ref={ref} tabIndex={-1} className="panel mail-open" aria-labelledby="mail-open-subject" data-testid="mail-open">
      <h2 id="mail-open-subject">{m.subject}</h2>
      <dl className="facts">
        <dt>To</dt>
        <dd>{m.to}</dd>
        <dt>Kind</dt>
        <dd>{templateLabel(m.template)}</dd>
        <dt>Queued</dt>
        <dd>
          <LocalTime iso={m.created_at} />
        </dd>
        <dt>Status</dt>
        <dd>
          {m.status === 'sent' ? (
            <>
              Sent <LocalTime iso={m.sent_at} />
            </>
          ) : (
            'In the outbox (not sent: this installation has no SMTP)'
          )}
        </dd>
      </dl>
      {m.text === null ? (
        <p className="error" role="status">
          This message cannot be read: it was stored encrypted under another <code>ENCRYPTION_KEY</code> than this installation's.
        </p>
      ) : (
        <pre className="mail-body" data-testid="mail-body">
          {withLinks(m.text, m.links)}
        </pre>
      )}
      <p>
        <button type="button" className="secondary" onClick={onClose}>
          Close message
        </button>
      </p>
    </article>
  );
}

function MailLinks({ message: m }: { message: MailboxMessage }) {
  if (m.text === null) return <span className="muted">cannot be decrypted with this ENCRYPTION_KEY</span>;
  if (m.links.length === 0) return <span className="muted">none</span>;
  return (
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
  );
}

/** The body's text with each of its http(s) links (as the API lists them) a link that opens in a new tab. */
function withLinks(text: string, links: string[]): ReactNode[] {
  const out: ReactNode[] = [];
  let rest = text;
  let n = 0;
  for (;;) {
    let at = -1;
    let found = '';
    for (const link of links) {
      const i = rest.indexOf(link);
      if (i >= 0 && (at < 0 || i < at || (i === at && link.length > found.length))) {
        at = i;
        found = link;
      }
    }
    if (at < 0) break;
    if (at > 0) out.push(rest.slice(0, at));
    out.push(
      <a key={n++} href={found} target="_blank" rel="noreferrer noopener">
        {found}
      </a>,
    );
    rest = rest.slice(at + found.length);
  }
  if (rest) out.push(rest);
  return out;
}

function templateLabel(template: string): string {
  if (template === 'verify_email') return 'Email verification';
  if (template === 'invitation') return 'Invitation';
  if (template === 'welcome') return 'Welcome';
  if (template === 'webhook_disabled') return 'Webhook disabled';
  if (template === 'test') return 'Test message';
  return template;
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
