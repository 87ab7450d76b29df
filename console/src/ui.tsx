import { type ReactNode, useCallback, useEffect, useId, useLayoutEffect, useRef, useState } from 'react';
import { Link } from 'wouter';
import { ApiError, describeError } from './api-errors';
import './states.css';

export { messageOf } from './api-errors';

/**
 * The reload of each failed load, by its error: a load's error shown with ErrorNote (the organization,
 * the list of organizations) offers Retry and, for a 404 or 403, the not-found page, without the
 * caller passing its reload along. Errors of actions are not here: they show as a note.
 */
const loadFailures = new WeakMap<object, () => void>();

/** Remember that `error` is a failed load that `reload` runs again (useLoad and usePages call this). */
export function markLoadFailure(error: unknown, reload: () => void): void {
  if (typeof error === 'object' && error !== null) loadFailures.set(error, reload);
}

/** Load something when the inputs change; `reload` runs it again. Answers of a superseded load are dropped. */
export function useLoad<T>(load: () => Promise<T>, inputs: unknown[]): { data: T | undefined; error: unknown; loading: boolean; reload: () => void } {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({ data: undefined, error: null, loading: true });
  const [round, setRound] = useState(0);
  const seq = useRef(0);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the caller names the inputs
  useEffect(() => {
    const mine = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => mine === seq.current && setState({ data, error: null, loading: false }),
      (error: unknown) => {
        if (mine !== seq.current) return;
        markLoadFailure(error, reload);
        setState({ data: undefined, error, loading: false });
      },
    );
  }, [...inputs, round]);
  return { ...state, reload };
}

/** An error in words (describeError): the sentence in bold, the service's own words, a reference for support. */
function ErrorWords({ error }: { error: unknown }) {
  const { summary, detail, reference } = describeError(error);
  return (
    <>
      <strong>{summary}</strong>
      {detail ? ` ${detail}` : null}
      {reference ? <span className="small"> Reference: {reference}.</span> : null}
    </>
  );
}

/** An error of an action (a form, a button), in words; a failed load gets Retry (LoadError). */
export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const retry = typeof error === 'object' ? loadFailures.get(error) : undefined;
  if (retry) return <LoadError error={error} retry={retry} page />;
  return (
    <p className="error" role="alert" data-code={error instanceof ApiError ? error.code : undefined}>
      <ErrorWords error={error} />
    </p>
  );
}

/**
 * A load that failed: what could not be loaded, why in words, and Retry. With `page` (the load a whole
 * page stands on), a 404 or 403 is the not-found page instead: there is nothing to retry.
 */
export function LoadError({ error, retry, what, page = false, busy = false }: { error: unknown; retry: () => void; what?: string; page?: boolean; busy?: boolean }) {
  if (!error) return null;
  if (page && error instanceof ApiError && (error.status === 404 || error.status === 403)) return <Missing error={error} />;
  return (
    <div className="error load-error" role="alert" data-code={error instanceof ApiError ? error.code : undefined}>
      <p>
        {what ? <>Could not load {what}. </> : null}
        <ErrorWords error={error} />
      </p>
      <button type="button" className="secondary" onClick={retry} disabled={busy}>
        {busy ? 'Retrying…' : 'Retry'}
      </button>
    </div>
  );
}

/** The page of a 404 or 403 answer: the service names what is missing ("Organization not found"). */
function Missing({ error }: { error: ApiError }) {
  if (error.status === 403) {
    return (
      <StatePage title="You do not have access to this" link={{ href: '~/console/', label: 'Go to the console home' }}>
        Your role does not allow it. An owner or admin of the organization can change your role.
      </StatePage>
    );
  }
  const named = /^(.{1,60}) not found$/.exec(error.message.trim())?.[1];
  const what = named && named !== 'Resource' && named !== 'Route' ? named : null;
  return (
    <StatePage title={what ? `${what} not found` : 'Not found'} link={{ href: '~/console/', label: 'Go to the console home' }}>
      {what === 'Organization'
        ? 'This organization does not exist, or your account is not a member of it. If someone invited you, open the invitation link they sent.'
        : what
          ? `This ${what.toLowerCase()} does not exist, or it is not shared with you.`
          : 'There is nothing at this address, or it is not shared with you.'}
    </StatePage>
  );
}

/**
 * A page that stands for a state (not found, no access): a heading, a sentence, a link back. Inside the
 * console's layout it is the content of its <main>; alone (an organization that could not be loaded has
 * no layout around it) it is a <main> of its own.
 */
export function StatePage({ title, children, link }: { title: string; children: ReactNode; link: { href: string; label: string } }) {
  const id = useId();
  const ref = useRef<HTMLElement>(null);
  const [alone, setAlone] = useState(false);
  useLayoutEffect(() => {
    if (ref.current && !ref.current.parentElement?.closest('main')) setAlone(true);
  }, []);
  const body = (
    <section ref={ref} className="state-page" aria-labelledby={id} data-testid="state-page">
      <h1 id={id}>{title}</h1>
      <p>{children}</p>
      <p>
        <Link href={link.href}>{link.label}</Link>
      </p>
    </section>
  );
  return alone ? <main className="state-page-main">{body}</main> : body;
}

/** The shape of what is loading, drawn as grey placeholders. */
export type SkeletonShape = 'lines' | 'table' | 'cards' | 'chart';

/**
 * A placeholder while something loads: shaped bars (hidden from assistive technology), `aria-busy`, and
 * "Loading <what>…" for screen readers.
 */
export function Loading({ what = 'page', shape = 'lines', rows = 3 }: { what?: string; shape?: SkeletonShape; rows?: number }) {
  const bars = Array.from({ length: rows }, (_, i) => i);
  return (
    <div className={`skeleton skeleton-${shape}`} aria-busy="true" data-testid="loading">
      <span className="visually-hidden" role="status">
        Loading {what}…
      </span>
      <div aria-hidden="true" className="skeleton-shapes">
        {shape === 'cards' ? (
          bars.map((i) => (
            <div key={i} className="skeleton-card">
              <span className="skeleton-bar short" />
              <span className="skeleton-bar tall" />
              <span className="skeleton-bar" />
            </div>
          ))
        ) : shape === 'chart' ? (
          <span className="skeleton-bar skeleton-chart" />
        ) : shape === 'table' ? (
          <>
            <span className="skeleton-bar head" />
            {bars.map((i) => (
              <span key={i} className="skeleton-row">
                <span className="skeleton-bar" />
                <span className="skeleton-bar" />
                <span className="skeleton-bar" />
                <span className="skeleton-bar short" />
              </span>
            ))}
          </>
        ) : (
          bars.map((i) => <span key={i} className={`skeleton-bar line-${i % 3}`} />)
        )}
      </div>
    </div>
  );
}

/**
 * The outcome of something done: success, failure or neutral. The words say which (a failure says it
 * failed); the colour and the mark only repeat them. A failure is an alert, the others a status.
 */
export function StatusNote({ tone, children, testId }: { tone: 'success' | 'failure' | 'neutral'; children: ReactNode; testId?: string }) {
  return (
    <p className={`state-note state-${tone}`} role={tone === 'failure' ? 'alert' : 'status'} data-tone={tone} data-testid={testId}>
      {children}
    </p>
  );
}

/** A checkbox with its label: the box keeps its size however the label wraps. */
export function CheckLabel({ checked, onChange, children }: { checked: boolean; onChange: (checked: boolean) => void; children: ReactNode }) {
  return (
    <label className="check">
      <input type="checkbox" checked={checked} onChange={(e) => onChange(e.target.checked)} />
      <span>{children}</span>
    </label>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <header className="page-header">
      <h1>{title}</h1>
      {children ? <div className="page-actions">{children}</div> : null}
    </header>
  );
}

export function Field({ label, children, hint }: { label: string; children: ReactNode; hint?: string }) {
  return (
    // biome-ignore lint/a11y/noLabelWithoutControl: the control is the child passed in, which the label wraps
    <label className="field">
      <span>{label}</span>
      {children}
      {hint ? <small className="muted">{hint}</small> : null}
    </label>
  );
}

/** A secret the API shows once: visible, selectable, with a copy button, and a warning that it will not come back. */
export function SecretOnce({ label, value, onDone }: { label: string; value: string; onDone?: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="secret-once" role="status">
      <p>
        <strong>{label}</strong> — copy it now: it is shown only once.
      </p>
      <code data-testid="secret-value">{value}</code>
      <div className="row">
        <button
          type="button"
          onClick={() => {
            void navigator.clipboard?.writeText(value).then(() => setCopied(true), () => setCopied(false));
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        {onDone ? (
          <button type="button" className="secondary" onClick={onDone}>
            Done
          </button>
        ) : null}
      </div>
    </div>
  );
}

/** A destructive button that asks once more inline (no browser dialog). */
export function ConfirmButton({ label, confirmLabel, onConfirm, disabled }: { label: string; confirmLabel: string; onConfirm: () => Promise<void> | void; disabled?: boolean }) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  if (!asking) {
    return (
      <button type="button" className="danger" disabled={disabled} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  return (
    <span className="row">
      <button
        type="button"
        className="danger"
        disabled={busy}
        onClick={async () => {
          setBusy(true);
          try {
            await onConfirm();
          } finally {
            setBusy(false);
            setAsking(false);
          }
        }}
      >
        {confirmLabel}
      </button>
      <button type="button" className="secondary" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

const intFormat = new Intl.NumberFormat('en-US');
export const fmtInt = (n: number | null | undefined) => (n === null || n === undefined ? '∞' : intFormat.format(n));
export const fmtDate = (iso: string | null | undefined) => (iso ? `${new Date(iso).toISOString().slice(0, 16).replace('T', ' ')} UTC` : '—');
export const fmtDay = (iso: string) => iso.slice(0, 10);

/** Ask something of the server and show its error, keeping the form's values (submit handlers). */
export function useAction(): { busy: boolean; error: unknown; run: (action: () => Promise<void>) => Promise<boolean>; clear: () => void } {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = useCallback(async (action: () => Promise<void>) => {
    setBusy(true);
    setError(null);
    try {
      await action();
      return true;
    } catch (err) {
      setError(err);
      return false;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, clear: () => setError(null) };
}
