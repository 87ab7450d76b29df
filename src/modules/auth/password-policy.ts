import { ValidationError } from '../../errors.js';

/**
 * SPEC §8 account safety: a password on a common-password list, or equal to the email, is refused
 * (400 VALIDATION_ERROR naming `password`). The list is the maintained one of zxcvbn-ts
 * (`@zxcvbn-ts/language-common`, ~49,000 lower-case passwords from breach corpora); it is loaded on the
 * first check (a quarter of a second), not at boot. Comparison ignores case and surrounding spaces,
 * so `Password`, ` password ` and `PASSWORD` are all `password`. The email's local part counts as the
 * email (`ada.lovelace` for ada.lovelace@example.com is the first guess of anyone who knows the address).
 * Length (8 to 1,024) is the route schema's job.
 */
let common: Promise<Set<string>> | undefined;

function commonPasswords(): Promise<Set<string>> {
  common ??= import('@zxcvbn-ts/language-common').then(({ dictionary }) => new Set(dictionary['passwords-common']));
  return common;
}

/** Why `password` is refused for the account `email`, or null when it is acceptable. */
export async function passwordProblem(password: string, email: string): Promise<string | null> {
  const candidate = password.trim().toLowerCase();
  const address = email.trim().toLowerCase();
  const localPart = address.slice(0, Math.max(0, address.lastIndexOf('@')));
  if (candidate === address || (localPart !== '' && candidate === localPart)) return 'must not be your email address';
  if ((await commonPasswords()).has(candidate)) return 'is too common (it is on a list of breached passwords)';
  return null;
}

/** Throw 400 VALIDATION_ERROR naming `password` unless the password is acceptable; call before hashing. */
export async function assertAcceptablePassword(password: string, email: string): Promise<void> {
  const problem = await passwordProblem(password, email);
  if (problem) throw new ValidationError(`Choose another password: it ${problem}`, [{ field: 'password', message: problem }]);
}
