import { createHash } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** A usage record that could not be sent: replayed later under the same invocation id (so at most one deduction). */
export interface OutboxEntry {
  invocation_id: string;
  mode: 'stdio' | 'service';
  /** The record-usage / usage body exactly as it was first sent. */
  body: Record<string, unknown> & { tool_name: string; invocation_id: string };
  /** When the tool ran (ISO 8601). */
  created_at: string;
}

export interface Outbox {
  add(entry: OutboxEntry): Promise<void>;
  list(): Promise<OutboxEntry[]>;
  remove(invocationId: string): Promise<void>;
  /** Gives up on an entry the service refused for good; kept aside for a person to look at. */
  fail(invocationId: string, reason: string): Promise<void>;
}

/** For hosted servers (service mode): survives outages, not restarts. */
export class MemoryOutbox implements Outbox {
  private readonly entries = new Map<string, OutboxEntry>();
  readonly failed: Array<{ entry: OutboxEntry; reason: string }> = [];

  async add(entry: OutboxEntry): Promise<void> {
    this.entries.set(entry.invocation_id, entry);
  }
  async list(): Promise<OutboxEntry[]> {
    return [...this.entries.values()];
  }
  async remove(invocationId: string): Promise<void> {
    this.entries.delete(invocationId);
  }
  async fail(invocationId: string, reason: string): Promise<void> {
    const entry = this.entries.get(invocationId);
    if (entry) this.failed.push({ entry, reason });
    this.entries.delete(invocationId);
  }
}

const fileName = (invocationId: string) => `${createHash('sha256').update(invocationId).digest('hex').slice(0, 40)}.json`;

/**
 * One file per pending record in a directory: written to a temporary name, fsynced, then renamed, so
 * a crash leaves either the whole entry or none. Several processes may share the directory: each may
 * send an entry, and the service's idempotency on the invocation id makes that one deduction.
 */
export class FileOutbox implements Outbox {
  constructor(readonly dir: string) {}

  async add(entry: OutboxEntry): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const target = join(this.dir, fileName(entry.invocation_id));
    const temporary = `${target}.${process.pid}.${Date.now()}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    try {
      await handle.writeFile(JSON.stringify(entry));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
    await syncDirectory(this.dir);
  }

  async list(): Promise<OutboxEntry[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const entries: OutboxEntry[] = [];
    for (const name of names.filter((n) => n.endsWith('.json'))) {
      try {
        const entry = JSON.parse(await readFile(join(this.dir, name), 'utf8')) as OutboxEntry;
        if (typeof entry?.invocation_id === 'string' && entry.body) entries.push(entry);
      } catch (err) {
        // Removed by another process meanwhile, or unreadable: the latter is set aside, never guessed at.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') await this.moveAside(name);
      }
    }
    return entries.sort((a, b) => a.created_at.localeCompare(b.created_at));
  }

  async remove(invocationId: string): Promise<void> {
    await unlink(join(this.dir, fileName(invocationId))).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  async fail(invocationId: string, reason: string): Promise<void> {
    const name = fileName(invocationId);
    try {
      const entry = JSON.parse(await readFile(join(this.dir, name), 'utf8')) as OutboxEntry;
      await mkdir(join(this.dir, 'failed'), { recursive: true, mode: 0o700 });
      await rename(join(this.dir, name), join(this.dir, 'failed', name));
      await writeNote(join(this.dir, 'failed', `${name}.reason.txt`), `${new Date().toISOString()} ${entry.invocation_id}: ${reason}\n`);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  private async moveAside(name: string): Promise<void> {
    await mkdir(join(this.dir, 'failed'), { recursive: true, mode: 0o700 });
    await rename(join(this.dir, name), join(this.dir, 'failed', name)).catch(() => undefined);
  }
}

async function writeNote(path: string, text: string): Promise<void> {
  const handle = await open(path, 'a', 0o600);
  try {
    await handle.writeFile(text);
  } finally {
    await handle.close();
  }
}

/** The rename is durable only once the directory itself is synced (POSIX); best effort elsewhere. */
async function syncDirectory(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // Some platforms cannot open or fsync a directory; the entry is still written and renamed.
  }
}
