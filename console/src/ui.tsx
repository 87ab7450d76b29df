import { type ReactNode, useCallback, useEffect, useRef, useState } from 'react';
import { ApiError } from './api-errors';

/** Load something when the inputs change; `reload` runs it again. Answers of a superseded load are dropped. */
export function useLoad<T>(load: () => Promise<T>, inputs: unknown[]): { data: T | undefined; error: unknown; loading: boolean; reload: () => void } {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({ data: undefined, error: null, loading: true });
  const [round, setRound] = useState(0);
  const seq = useRef(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the caller names the inputs
  useEffect(() => {
    const mine = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => mine === seq.current && setState({ data, error: null, loading: false }),
      (error: unknown) => mine === seq.current && setState({ data: undefined, error, loading: false }),
    );
  }, [...inputs, round]);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  return { ...state, reload };
}

export function messageOf(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p className="error" role="alert">
      {messageOf(error)}
    </p>
  );
}

export function Loading() {
  return (
    <p className="muted" aria-live="polite">
      Loading…
    </p>
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
