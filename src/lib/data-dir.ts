import { chmodSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The development secrets (config.ts writes them, cli.ts reads them). */
export const SECRETS_FILE = 'secrets.json';

/** DATA_DIR and the directories in it: owner only (docs/accounts.md, Account safety: DATA_DIR is created 0700). */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/** Create a directory owner-only (parents too, when missing). An existing one is left to `tightenMode`. */
export function makePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
}

/**
 * Take away every permission bit beyond `mode` (group and others); a stricter mode is kept. Returns
 * a sentence for the log when something changed, else null.
 */
export function tightenMode(path: string, mode: number): string | null {
  const current = statSync(path).mode & 0o777;
  if ((current & ~mode) === 0) return null;
  chmodSync(path, mode);
  return `${path} was mode ${current.toString(8)}, readable beyond its owner; now ${mode.toString(8)}`;
}

/**
 * DATA_DIR holds the embedded database and the development secrets, so nobody but the service's user
 * may enter it: created 0700; one made looser by an older version or by hand is tightened, and so is
 * its secrets file (0600). Returns what was tightened, so the caller logs it once at start.
 */
export function securePrivateDataDir(dir: string): string[] {
  makePrivateDir(dir);
  const notices = [tightenMode(dir, PRIVATE_DIR_MODE)];
  const secrets = join(dir, SECRETS_FILE);
  if (existsSync(secrets)) notices.push(tightenMode(secrets, PRIVATE_FILE_MODE));
  return notices.filter((n): n is string => n !== null);
}
