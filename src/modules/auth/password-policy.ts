import { ValidationError } from '../../errors.js';
import { estimateStrength } from './password-strength.js';

/**
 * The password rule (docs/accounts.md, "Password rule"): refused with 400 VALIDATION_ERROR naming
 * `password` when it is the email address or its local part, on the common-password list of
 * `@zxcvbn-ts/language-common` (compared in lower case, without surrounding spaces), or scored below
 * MIN_SCORE by zxcvbn-ts, whose user inputs are the email, its local part and the full name (and their
 * words), so `ada.lovelace42` is weak for ada.lovelace@example.com. The estimator runs in a worker
 * behind the password-hashing gate (password-strength.ts). Length (8 to 1,024) is the route schema's
 * job. Every path that sets a password calls assertAcceptablePassword before hashing; login never does.
 */
export const MIN_SCORE = 3;

export interface Account {
  email: string;
  fullName?: string | null | undefined;
}

/** What the estimator is told about the account, so a password made of it scores low. */
export function userInputsOf(account: Account): string[] {
  const address = account.email.trim().toLowerCase();
  const localPart = address.slice(0, Math.max(0, address.lastIndexOf('@')));
  const name = account.fullName?.trim() ?? '';
  const words = `${localPart} ${name}`.split(/[^\p{L}\p{N}]+/u).filter((w) => w.length >= 3);
  return [...new Set([address, localPart, name, ...words].filter((v) => v !== ''))];
}

/** Why `password` is refused for `account`, or null when it is acceptable. */
export async function passwordProblem(password: string, account: Account): Promise<string | null> {
  const candidate = password.trim().toLowerCase();
  const address = account.email.trim().toLowerCase();
  const localPart = address.slice(0, Math.max(0, address.lastIndexOf('@')));
  if (candidate === address || (localPart !== '' && candidate === localPart)) return 'must not be your email address';
  const strength = await estimateStrength(password, userInputsOf(account));
  if (strength.isCommon) return 'is too common (it is on a list of breached passwords)';
  if (strength.score < MIN_SCORE) {
    const hint = [strength.warning, ...strength.suggestions].filter(Boolean).join(' ');
    return `is too easy to guess (strength ${strength.score} of 4, at least ${MIN_SCORE} needed)${hint ? `: ${hint}` : ''}`;
  }
  return null;
}

/** Throw 400 VALIDATION_ERROR naming `password` unless the password is acceptable; call before hashing. */
export async function assertAcceptablePassword(password: string, account: Account): Promise<void> {
  const problem = await passwordProblem(password, account);
  if (problem) throw new ValidationError(`Choose another password: it ${problem}`, [{ field: 'password', message: problem }]);
}
