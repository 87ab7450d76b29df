import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { acquireDataDirLock, DataDirLockedError } from './client.js';

describe('DATA_DIR lock (PGlite has none of its own)', () => {
  it('refuses a second holder while the first lives, with a message saying what to do', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cg-lock-'));
    const release = acquireDataDirLock(dir);
    expect(() => acquireDataDirLock(dir)).toThrow(DataDirLockedError);
    expect(() => acquireDataDirLock(dir)).toThrow(/in use by process \d+.*DATABASE_URL/s);
    release();
    const again = acquireDataDirLock(dir);
    again();
  });

  it('takes over a lock whose process is gone', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cg-lock-'));
    // A pid far above any pid_max: no such process.
    writeFileSync(join(dir, 'creditgate.lock'), '999999999');
    const release = acquireDataDirLock(dir);
    expect(readFileSync(join(dir, 'creditgate.lock'), 'utf8')).toBe(String(process.pid));
    release();
  });
});
