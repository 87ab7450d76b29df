import { type ReactNode, useId } from 'react';
import type { operations } from '../generated/openapi';
import { ApiError } from '../api-errors';
import { fmtDate } from '../ui';
import './extra.css';

/**
 * Pieces shared by the budgets, auto top-up, template deployment and mailbox pages: the JSON body an
 * operation takes (the types generated from /openapi.json, as console/src/types.ts uses them), a form
 * field that shows the API's message for it, and a time in the browser's own zone.
 */
export type BodyOf<Op extends keyof operations> = operations[Op] extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

/**
 * A 400's messages by the field they name (details.fields, docs/openapi.md "Shapes"): an item of an
 * array (`alert_thresholds.0`) counts for its array. Several messages of one field are joined.
 */
export function fieldErrorsOf(error: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!(error instanceof ApiError)) return out;
  for (const f of error.fields) {
    const name = f.field.replace(/^\/+/, '').split(/[./[]/)[0] || f.field;
    out[name] = out[name] ? `${out[name]}; ${f.message}` : f.message;
  }
  return out;
}

/** What a control needs to be labelled, described by its hint and error, and marked invalid. */
export interface ControlProps {
  id: string;
  'aria-describedby': string | undefined;
  'aria-invalid': true | undefined;
}

/**
 * A labelled control with its hint and the API's message for it, both tied to the control
 * (`aria-describedby`); the control is marked invalid while the message shows.
 */
export function FormField({ label, hint, error, testId, children }: { label: string; hint?: string; error?: string; testId?: string; children: (control: ControlProps) => ReactNode }) {
  const id = useId();
  const hintId = `${id}-hint`;
  const errorId = `${id}-error`;
  const describedBy = [hint ? hintId : null, error ? errorId : null].filter(Boolean).join(' ') || undefined;
  return (
    <div className="field" data-testid={testId}>
      <label htmlFor={id}>{label}</label>
      {children({ id, 'aria-describedby': describedBy, 'aria-invalid': error ? true : undefined })}
      {hint ? (
        <small id={hintId} className="muted">
          {hint}
        </small>
      ) : null}
      {error ? <FieldMessage id={errorId}>{error}</FieldMessage> : null}
    </div>
  );
}

/** The API's message for one field, beside it. */
export function FieldMessage({ id, children }: { id: string; children: ReactNode }) {
  return (
    <small id={id} className="field-error" data-testid="field-error">
      {children}
    </small>
  );
}

const localFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

/** A time as the browser's zone writes it; the UTC time in its title, the ISO time in `dateTime`. */
export function LocalTime({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <>—</>;
  return (
    <time dateTime={iso} title={fmtDate(iso)}>
      {localFormat.format(new Date(iso))}
    </time>
  );
}

/** A whole number typed into a field: null when empty; anything else is sent as typed, and the API names what is wrong. */
export function wholeOrNull(text: string): number | null {
  const trimmed = text.trim();
  return trimmed === '' ? null : Number(trimmed);
}
