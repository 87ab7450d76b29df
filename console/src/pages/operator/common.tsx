import { createContext, useCallback, useContext, useState } from 'react';
import { type OperatorApi, operatorApi } from '../../api';
import { ApiError } from '../../api-errors';
import { LoadError, messageOf, StatusNote, useAction } from '../../ui';
import type { Schemas } from '../../types';

/** The operator's typed calls with the key typed into this tab (docs/console.md "Operator"). */
export type OperatorCall = OperatorApi;

const OperatorContext = createContext<OperatorCall | null>(null);
export const OperatorProvider = OperatorContext.Provider;

export function useOperator(): OperatorCall {
  const call = useContext(OperatorContext);
  if (!call) throw new Error('useOperator outside OperatorProvider');
  return call;
}

/** The call bound to a key: the key goes in the X-Admin-Key header and nowhere else. */
export const callWith = (adminKey: string): OperatorCall => operatorApi(adminKey);

/**
 * A name that goes into the path as one segment (the typed client encodes it). "." and ".." would be
 * resolved away by the browser's URL parsing (even encoded) and the request, with the operator key,
 * would reach another admin route.
 */
export function segment(name: string): string {
  if (name === '.' || name === '..') throw new Error('A name must not be "." or ".."');
  return name;
}

export const TIERS = ['sandbox', 'trial', 'launch', 'growth', 'enterprise'] as const;
export const PLANS = ['free', 'pro', 'enterprise'] as const;
export const STATUSES = ['active', 'suspended'] as const;

/** The value of a list that a select's value names (the answers type tier, status and plan as strings). */
export function oneOf<T extends string>(list: readonly T[], value: string): T | undefined {
  return list.find((v) => v === value);
}

export type OrganizationHit = Schemas['AdminOrganizationHit'];

export type AdminDeployment = Schemas['AdminDeployment'];

/**
 * The API's refusal in words, with every field it names; a failed load (given `retry`) offers Retry.
 * The code stays out of the text (it is on the element as data-code).
 */
export function OperatorError({ error, retry, what, busy }: { error: unknown; retry?: () => void; what?: string; busy?: boolean }) {
  if (!error) return null;
  if (retry) return <LoadError error={error} retry={retry} what={what} busy={busy} />;
  const text = messageOf(error);
  const fields = error instanceof ApiError ? error.fields.map((f) => `${f.field} ${f.message}`).filter((f) => !text.includes(f)) : [];
  return (
    <p className="error" role="alert" data-code={error instanceof ApiError ? error.code : undefined}>
      {text}
      {fields.length > 0 ? ` (${fields.join('; ')})` : null}
    </p>
  );
}

export interface OperatorAction {
  busy: boolean;
  error: unknown;
  done: string | null;
  /** Run a change; its answer, put in words, becomes the success note. */
  run(change: () => Promise<string>): Promise<boolean>;
}

export function useOperatorAction(): OperatorAction {
  const action = useAction();
  const [done, setDone] = useState<string | null>(null);
  const { run: runAction } = action;
  const run = useCallback(
    async (change: () => Promise<string>) => {
      setDone(null);
      let note = '';
      const ok = await runAction(async () => {
        note = await change();
      });
      if (ok) setDone(note);
      return ok;
    },
    [runAction],
  );
  return { busy: action.busy, error: action.error, done, run };
}

/** What the last action came to: the success note or the error. */
export function Outcome({ action }: { action: OperatorAction }) {
  if (action.error) return <OperatorError error={action.error} />;
  if (action.done) {
    return (
      <StatusNote tone="success">{action.done}</StatusNote>
    );
  }
  return null;
}

/** An ISO time as a `datetime-local` value read as UTC, and back. */
export const toUtcInput = (iso: string | null): string => (iso ? iso.slice(0, 19) : '');
export const fromUtcInput = (value: string): string | null => (value ? new Date(`${value}Z`).toISOString() : null);

/** A number field's text: empty is null, anything else must be a whole number. */
export function wholeOrNull(value: string, field: string): number | null {
  const text = value.trim();
  if (text === '') return null;
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`${field} must be a whole number`);
  return n;
}
