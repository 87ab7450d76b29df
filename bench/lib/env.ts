import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** The environment of a benchmarked server: production mode, fresh secrets, the given database, plus `extra`. */
export function productionServerEnv(input: {
  databaseUrl: string;
  poolSize: number;
  dataDir: string;
  extra?: Record<string, string | undefined>;
}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    NODE_ENV: 'production',
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    PORT: '0',
    DATABASE_URL: input.databaseUrl,
    DATABASE_POOL_SIZE: String(input.poolSize),
    DATA_DIR: input.dataDir,
    JWT_SECRET: randomBytes(32).toString('base64url'),
    MCP_SERVICE_KEY: randomBytes(32).toString('base64url'),
    ADMIN_API_KEY: randomBytes(32).toString('base64url'),
    ENCRYPTION_KEY: randomBytes(32).toString('base64url'),
    // No mail is sent while measuring; production refuses to start without SMTP otherwise (docs/accounts.md).
    EMAIL_VERIFICATION: 'off',
    // BENCH_PGOPTIONS: session settings for the servers' PostgreSQL connections, e.g. auto_explain to
    // see where a statement's time goes (docs/benchmarks.md, "How to run").
    ...(process.env.BENCH_PGOPTIONS ? { PGOPTIONS: process.env.BENCH_PGOPTIONS } : {}),
    ...input.extra,
  };
}

/** The commit measured, and whether src/ or migrations/ had uncommitted changes. */
export function gitState(): { commit: string; dirty: boolean } {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const status = execFileSync('git', ['status', '--porcelain', '--', 'src', 'migrations'], { encoding: 'utf8' });
    return { commit, dirty: status.trim().length > 0 };
  } catch {
    return { commit: 'unknown', dirty: false };
  }
}
