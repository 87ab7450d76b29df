import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { staleness } from '../scripts/build-if-stale.mjs';

/**
 * The README's demo line as a new user runs it after `npm install` (docs/cli.md, "The demo"): taken
 * out of README.md, run against a running service, from the build as it is. What it must do: print the
 * console's address and a sign-in that works, and build nothing (no npx cache copy, no `prepare`).
 * A real clone and install cost minutes, so this test does not do them; the wall time is printed,
 * not asserted (speed goals live in bench/ and docs/cli.md records the measurement).
 */
const ROOT = process.cwd();
const children: ChildProcess[] = [];
const temporary: string[] = [];

afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

const tempDir = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  temporary.push(dir);
  return dir;
};

/** The one command of the sh block that follows the README's "provision a demo organization" sentence. */
function readmeDemoLine(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const match = /provision a demo organization[^\n]*\n+```sh\n([^\n]+)\n```/.exec(readme);
  if (!match) throw new Error('README.md has no demo line after "provision a demo organization"');
  return match[1]!.trim();
}

/**
 * Where the line runs: this checkout when its build is current (as after `npm install`, whose
 * `prepare` built it, and in CI), else a copy built now into a temporary directory with the same
 * compiler and configuration, so a stale local build never makes the test lie or fail.
 */
function builtCheckout(): string {
  if (!staleness(ROOT).stale) return ROOT;
  const dir = tempDir('cg-demo-build-');
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json', '--outDir', join(dir, 'dist')], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (!existsSync(join(dir, 'dist', 'cli.js'))) throw new Error(`the build for the demo test failed:\n${tsc.stdout}\n${tsc.stderr}`);
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  return dir;
}

/** Start `serve` on the embedded database and resolve with its address once it listens (bounded wait). */
function startServer(dataDir: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // Node itself, with tsx as its loader: the tsx wrapper would run the server as a grandchild that
    // the SIGKILL of afterAll does not reach.
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve'], {
      env: { ...process.env, NODE_ENV: 'development', LOG_LEVEL: 'info', DATA_DIR: dataDir, PORT: '0', SMTP_URL: '' },
    });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const listening = /creditgate listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (listening) {
        clearTimeout(timer);
        resolve(listening[1]!);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${out}`));
    });
  });
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Run `node …` as a shell would, with PATH pointing at an empty directory: whatever the command
 * tried to start besides itself (npm, npx, tsc, vite) would not be found, so a build cannot hide in it.
 */
function runNodeLine(line: string, cwd: string, env: Record<string, string>): Promise<Run> {
  const [program, ...args] = line.split(/\s+/);
  if (program !== 'node') throw new Error(`the README's demo line must run the build with node, not "${program}": ${line}`);
  const emptyPath = tempDir('cg-demo-path-');
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { cwd, env: { ...process.env, PATH: emptyPath, NODE_ENV: 'development', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`timed out: ${line}\n${stdout}\n${stderr}`));
    }, 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** Modification times of everything under dist/ that the build writes (a rebuild changes them). */
function buildTimes(root: string): Record<string, number> {
  const files = ['dist/cli.js', 'dist/cli/demo.js', 'dist/cli/admin-api.js'];
  return Object.fromEntries(files.map((f) => [f, statSync(join(root, f)).mtimeMs]));
}

describe("the README's demo line", () => {
  it('runs the build as it is, prints the console address and a sign-in that works, with the owner verified', async () => {
    const line = readmeDemoLine();
    expect(line).toMatch(/^node dist\/cli\.js demo$/);
    const root = builtCheckout();
    const dataDir = tempDir('cg-demo-data-');
    const base = await startServer(dataDir);
    const before = buildTimes(root);

    const demo = await runNodeLine(line, root, { DATA_DIR: dataDir, CREDITGATE_URL: base });
    expect(demo.code, demo.stderr).toBe(0);
    expect(buildTimes(root)).toEqual(before);
    // Recorded in docs/cli.md ("The demo"), not asserted.
    console.info(`README demo line: ${Math.round(demo.ms)} ms`);

    expect(demo.stdout).toContain(`Console: ${base}/console/`);
    const email = /^ {2}email:\s+(\S+@example\.com)$/m.exec(demo.stdout)?.[1];
    const password = /^ {2}password:\s+(\S+)$/m.exec(demo.stdout)?.[1];
    expect(email, demo.stdout).toBeDefined();
    expect(password, demo.stdout).toMatch(/^[0-9A-Za-z]{20}$/);
    expect(demo.stdout).toContain('The address is verified');

    const login = await fetch(`${base}/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password }),
    });
    expect(login.status).toBe(200);
    const session = ((await login.json()) as { data: { access_token: string; user: { email: string; email_verified: boolean } } }).data;
    expect(session.user).toMatchObject({ email, email_verified: true });
    // The sign-in opens the demo organization.
    const organizationId = /organization id:\s+([0-9a-f-]{36})/.exec(demo.stdout)![1]!;
    const orgs = await fetch(`${base}/organizations`, { headers: { authorization: `Bearer ${session.access_token}` } });
    const listed = ((await orgs.json()) as { data: Array<{ id: string; role?: string }> }).data;
    expect(listed.map((o) => o.id)).toContain(organizationId);
  }, 180_000);
});
