import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { loadConfig } from '../config.js';
import { openDatabase } from './client.js';

/**
 * DATA_DIR is created 0700 (docs/accounts.md, Account safety). The embedded database's files (PGlite writes them 0666 whatever
 * the umask) and the development secrets sit there, so the directory is the boundary: this is the
 * world-readable data directory of the security review, opened for real.
 */
const modeOf = (path: string) => statSync(path).mode & 0o777;

describe.skipIf(process.platform === 'win32')('DATA_DIR permissions', () => {
  it('a fresh DATA_DIR is 0700, its secrets 0600 and its database directory 0700; an existing 0755 one is tightened, once', { timeout: 120_000 }, async () => {
    const parent = mkdtempSync(join(tmpdir(), 'cg-perm-'));
    onTestFinished(() => rmSync(parent, { recursive: true, force: true }));
    const dataDir = join(parent, 'data');
    const notices: string[] = [];
    const warn = (message: string) => notices.push(message);

    // First start in development: the config writes the generated secrets, then the database opens.
    loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir });
    const fresh = await openDatabase({ databaseUrl: undefined, dataDir, warn });
    await fresh.close();
    expect(modeOf(dataDir)).toBe(0o700);
    expect(modeOf(join(dataDir, 'secrets.json'))).toBe(0o600);
    expect(modeOf(join(dataDir, 'pgdata'))).toBe(0o700);
    expect(notices).toEqual([]);

    // A directory an older version (or an operator) left readable by everyone.
    chmodSync(dataDir, 0o755);
    chmodSync(join(dataDir, 'secrets.json'), 0o644);
    chmodSync(join(dataDir, 'pgdata'), 0o755);
    const reopened = await openDatabase({ databaseUrl: undefined, dataDir, warn });
    await reopened.close();
    expect(modeOf(dataDir)).toBe(0o700);
    expect(modeOf(join(dataDir, 'secrets.json'))).toBe(0o600);
    expect(modeOf(join(dataDir, 'pgdata'))).toBe(0o700);
    expect(notices).toHaveLength(3);
    expect(notices[0]).toContain(`${dataDir} was mode 755`);

    // Tight already: nothing to say at the next start.
    const again = await openDatabase({ databaseUrl: undefined, dataDir, warn });
    await again.close();
    expect(notices).toHaveLength(3);
  });

  it('an existing secrets file that gets a new secret is made 0600 (a mode given at write applies only to new files)', () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cg-perm-'));
    onTestFinished(() => rmSync(dataDir, { recursive: true, force: true }));
    const file = join(dataDir, 'secrets.json');
    writeFileSync(file, JSON.stringify({ JWT_SECRET: 'j'.repeat(40) }), { mode: 0o644 });
    chmodSync(file, 0o644);
    const { generated } = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir });
    expect(Object.keys(generated)).toHaveLength(3);
    expect(modeOf(file)).toBe(0o600);
  });
});
