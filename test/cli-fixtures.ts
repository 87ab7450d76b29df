import { spawn } from 'node:child_process';
import { join } from 'node:path';

/** The CLI's source, run through tsx as `npm run cli` does. */
const CLI = join(process.cwd(), 'src', 'cli.ts');

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The CLI against a service at `url` with the operator key (docs/cli.md). Asynchronous on purpose:
 * the service answering it runs in the test's own event loop.
 */
export function runCli(url: string, adminApiKey: string, ...args: string[]): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, '--url', url, ...args], {
      env: { ...process.env, ADMIN_API_KEY: adminApiKey, CREDITGATE_URL: '', NO_COLOR: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`timed out: ${args.join(' ')}\n${stdout}\n${stderr}`));
    }, 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
