import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.js';

/** Configuration (README.md, Configuration): defaults, refusals naming the variable, production secrets, generated development secrets. */
const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'creditgate-config-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const SECRETS = {
  JWT_SECRET: 'j'.repeat(40),
  MCP_SERVICE_KEY: 'm'.repeat(30),
  ADMIN_API_KEY: 'a'.repeat(30),
  ENCRYPTION_KEY: 'e'.repeat(40),
};
const SECRET_NAMES = Object.keys(SECRETS) as Array<keyof typeof SECRETS>;
/** Production also needs a way to mail verification links (or verification turned off). */
const SMTP = { SMTP_URL: 'smtps://user:pass@smtp.example.com:465' };

/** Every test gets its own DATA_DIR, so nothing is written to the working directory. */
const env = (vars: Record<string, string | undefined> = {}) => ({ DATA_DIR: tempDir(), ...vars });

function configErrorOf(vars: Record<string, string | undefined>): ConfigError {
  try {
    loadConfig(vars);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(vars)}`);
}

describe('defaults', () => {
  it('PORT 8080, HOST 127.0.0.1, NEW_ORG_TIER sandbox, private webhook targets refused, embedded database', () => {
    const { config } = loadConfig(env({ ...SECRETS }));
    expect(config.port).toBe(8080);
    expect(config.host).toBe('127.0.0.1');
    expect(config.newOrgTier).toBe('sandbox');
    expect(config.webhookAllowPrivateNetworks).toBe(false);
    expect(config.databaseUrl).toBeUndefined();
    expect(config.redisUrl).toBeUndefined();
    expect(config.nodeEnv).toBe('development');
    expect(config.publicBaseUrl).toBe('http://127.0.0.1:8080');
    expect(config).toMatchObject({ metricsToken: undefined, metricsPort: undefined });
    expect(config.redisCommandTimeoutMs).toBe(250);
  });

  it('empty strings count as unset', () => {
    const { config } = loadConfig(env({ ...SECRETS, PORT: '', HOST: '', NEW_ORG_TIER: '', REDIS_URL: '', WEBHOOK_ALLOW_PRIVATE_NETWORKS: '' }));
    expect(config).toMatchObject({ port: 8080, host: '127.0.0.1', newOrgTier: 'sandbox', redisUrl: undefined, webhookAllowPrivateNetworks: false });
  });

  it('takes valid values as given', () => {
    const { config } = loadConfig(
      env({
        ...SECRETS,
        PORT: '3000',
        HOST: '0.0.0.0',
        NEW_ORG_TIER: 'trial',
        DATABASE_URL: 'postgres://u:p@db.example:5432/creditgate',
        REDIS_URL: 'redis://cache:6379',
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        PUBLIC_BASE_URL: 'https://api.example.com/',
        METRICS_TOKEN: 'prometheus-scrape-token-0123456789',
        METRICS_PORT: '9464',
        REDIS_COMMAND_TIMEOUT_MS: '2000',
      }),
    );
    expect(config).toMatchObject({
      port: 3000,
      host: '0.0.0.0',
      newOrgTier: 'trial',
      databaseUrl: 'postgres://u:p@db.example:5432/creditgate',
      redisUrl: 'redis://cache:6379',
      webhookAllowPrivateNetworks: true,
      publicBaseUrl: 'https://api.example.com',
      metricsToken: 'prometheus-scrape-token-0123456789',
      metricsPort: 9464,
      redisCommandTimeoutMs: 2000,
    });
    expect(loadConfig(env({ ...SECRETS, DATABASE_URL: 'memory://' })).config.databaseUrl).toBe('memory://');
    expect(loadConfig(env({ ...SECRETS, DATABASE_URL: 'postgresql://h/db' })).config.databaseUrl).toBe('postgresql://h/db');
    expect(loadConfig(env({ ...SECRETS, REDIS_URL: 'rediss://cache:6380' })).config.redisUrl).toBe('rediss://cache:6380');
    expect(loadConfig(env({ ...SECRETS, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'false' })).config.webhookAllowPrivateNetworks).toBe(false);
    for (const tier of ['sandbox', 'trial', 'launch', 'growth', 'enterprise']) {
      expect(loadConfig(env({ ...SECRETS, NEW_ORG_TIER: tier })).config.newOrgTier).toBe(tier);
    }
  });
});

describe('bad values stop the start with a ConfigError naming the variable', () => {
  const cases: Array<[string, string]> = [
    ['PORT', 'abc'],
    ['PORT', '80.5'],
    ['PORT', '-1'],
    ['PORT', '70000'],
    ['NEW_ORG_TIER', 'gold'],
    ['NEW_ORG_TIER', 'Launch'],
    ['DATABASE_URL', 'mysql://x'],
    ['DATABASE_URL', 'not a url'],
    ['REDIS_URL', 'http://x'],
    ['REDIS_URL', 'localhost:6379'],
    ['WEBHOOK_ALLOW_PRIVATE_NETWORKS', 'maybe'],
    ['WEBHOOK_ALLOW_PRIVATE_NETWORKS', 'yes please'],
    ['NODE_ENV', 'staging'],
    ['PUBLIC_BASE_URL', 'ftp://example.com'],
    ['METRICS_TOKEN', 'too-short'],
    ['METRICS_TOKEN', 'a token with spaces 0123456789'],
    ['METRICS_PORT', '0'],
    ['METRICS_PORT', 'abc'],
    ['METRICS_PORT', '8080'],
    ['REDIS_COMMAND_TIMEOUT_MS', '0'],
    ['REDIS_COMMAND_TIMEOUT_MS', 'soon'],
    ['REDIS_COMMAND_TIMEOUT_MS', '60001'],
  ];
  for (const [name, value] of cases) {
    it(`${name}=${value}`, () => {
      const err = configErrorOf(env({ ...SECRETS, [name]: value }));
      expect(err.variable).toBe(name);
      expect(err.message).toContain(name);
    });
  }

  it('a secret that is too short is refused, naming it', () => {
    for (const name of SECRET_NAMES) {
      const err = configErrorOf(env({ ...SECRETS, [name]: 'short' }));
      expect(err.variable).toBe(name);
      expect(err.message).toContain(name);
    }
  });
});

describe('NODE_ENV=production', () => {
  it('refuses to start without each of the four secrets, naming the missing one', () => {
    for (const name of SECRET_NAMES) {
      const dataDir = tempDir();
      const err = configErrorOf({ ...SECRETS, NODE_ENV: 'production', DATA_DIR: dataDir, [name]: undefined });
      expect(err.variable).toBe(name);
      expect(err.message).toContain(name);
      // Nothing is generated or written in production.
      expect(existsSync(join(dataDir, 'secrets.json'))).toBe(false);
    }
  });

  it('refuses an empty secret as missing', () => {
    const err = configErrorOf(env({ ...SECRETS, NODE_ENV: 'production', ADMIN_API_KEY: '' }));
    expect(err.variable).toBe('ADMIN_API_KEY');
  });

  it('starts with all four, generating nothing', () => {
    const dataDir = tempDir();
    const { config, generated } = loadConfig({ ...SECRETS, ...SMTP, NODE_ENV: 'production', DATA_DIR: dataDir });
    expect(generated).toEqual({});
    expect(config).toMatchObject({
      nodeEnv: 'production',
      jwtSecret: SECRETS.JWT_SECRET,
      mcpServiceKey: SECRETS.MCP_SERVICE_KEY,
      adminApiKey: SECRETS.ADMIN_API_KEY,
      encryptionKey: SECRETS.ENCRYPTION_KEY,
    });
    expect(existsSync(join(dataDir, 'secrets.json'))).toBe(false);
  });

  it('refuses to start without SMTP_URL unless EMAIL_VERIFICATION=off, naming both and the way out', () => {
    for (const verification of [undefined, 'on']) {
      const err = configErrorOf(env({ ...SECRETS, NODE_ENV: 'production', EMAIL_VERIFICATION: verification }));
      expect(err.variable).toBe('SMTP_URL');
      expect(err.message).toMatch(/^SMTP_URL: is required when NODE_ENV=production.*set SMTP_URL, or set EMAIL_VERIFICATION=off/);
    }
    const off = loadConfig(env({ ...SECRETS, NODE_ENV: 'production', EMAIL_VERIFICATION: 'off' })).config;
    expect(off).toMatchObject({ nodeEnv: 'production', smtpUrl: undefined, emailVerification: 'off' });
    expect(loadConfig(env({ ...SECRETS, ...SMTP, NODE_ENV: 'production' })).config.emailVerification).toBe('on');
  });
});

describe('EMAIL_VERIFICATION', () => {
  it('is on by default in every mode (development needs no SMTP: the local mailbox has the links); off turns it off', () => {
    expect(loadConfig(env()).config.emailVerification).toBe('on');
    expect(loadConfig(env({ EMAIL_VERIFICATION: 'off' })).config.emailVerification).toBe('off');
    expect(loadConfig(env({ ...SMTP, NODE_ENV: 'production', ...SECRETS, EMAIL_VERIFICATION: 'off' })).config.emailVerification).toBe('off');
  });

  it('refuses anything but on or off, naming the variable', () => {
    for (const value of ['yes', 'false', 'OFF', ' off']) {
      const err = configErrorOf(env({ EMAIL_VERIFICATION: value }));
      expect(err.variable, value).toBe('EMAIL_VERIFICATION');
      expect(err.message, value).toContain('must be on or off');
    }
  });
});

describe('development secrets', () => {
  it('are generated once into DATA_DIR/secrets.json and reused by the next start', () => {
    const dataDir = tempDir();
    const first = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir });
    expect(Object.keys(first.generated).sort()).toEqual([...SECRET_NAMES].sort());
    for (const value of Object.values(first.generated)) expect(value!.length).toBeGreaterThanOrEqual(32);
    expect(new Set(Object.values(first.generated)).size).toBe(4);
    expect(first.config).toMatchObject({
      jwtSecret: first.generated.JWT_SECRET,
      mcpServiceKey: first.generated.MCP_SERVICE_KEY,
      adminApiKey: first.generated.ADMIN_API_KEY,
      encryptionKey: first.generated.ENCRYPTION_KEY,
    });
    const file = join(dataDir, 'secrets.json');
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(first.generated);
    if (process.platform !== 'win32') expect(statSync(file).mode & 0o777).toBe(0o600);

    const second = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir });
    expect(second.generated).toEqual({});
    expect(second.config).toMatchObject({
      jwtSecret: first.config.jwtSecret,
      mcpServiceKey: first.config.mcpServiceKey,
      adminApiKey: first.config.adminApiKey,
      encryptionKey: first.config.encryptionKey,
    });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(first.generated);
  });

  it('without NODE_ENV the service runs as development and generates too', () => {
    const dataDir = tempDir();
    const { config, generated } = loadConfig({ DATA_DIR: dataDir });
    expect(config.nodeEnv).toBe('development');
    expect(Object.keys(generated)).toHaveLength(4);
    expect(existsSync(join(dataDir, 'secrets.json'))).toBe(true);
  });

  it('only the missing ones are generated; a secret from the environment wins over a stored one', () => {
    const dataDir = tempDir();
    const first = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir, JWT_SECRET: SECRETS.JWT_SECRET });
    expect(Object.keys(first.generated).sort()).toEqual(['ADMIN_API_KEY', 'ENCRYPTION_KEY', 'MCP_SERVICE_KEY']);
    expect(first.config.jwtSecret).toBe(SECRETS.JWT_SECRET);
    const stored = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Record<string, string>;
    expect(stored).not.toHaveProperty('JWT_SECRET');

    const second = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir, MCP_SERVICE_KEY: SECRETS.MCP_SERVICE_KEY });
    expect(second.config.mcpServiceKey).toBe(SECRETS.MCP_SERVICE_KEY);
    expect(second.config.adminApiKey).toBe(first.config.adminApiKey);
    expect(second.config.encryptionKey).toBe(first.config.encryptionKey);
    // JWT_SECRET is now missing from both the environment and the file: generated once, then kept.
    expect(Object.keys(second.generated)).toEqual(['JWT_SECRET']);
    const third = loadConfig({ NODE_ENV: 'development', DATA_DIR: dataDir });
    expect(third.generated).toEqual({});
    expect(third.config.jwtSecret).toBe(second.config.jwtSecret);
    expect(third.config.mcpServiceKey).toBe(first.config.mcpServiceKey);
  });

  it('two data directories get different secrets', () => {
    const a = loadConfig({ NODE_ENV: 'development', DATA_DIR: tempDir() }).config;
    const b = loadConfig({ NODE_ENV: 'development', DATA_DIR: tempDir() }).config;
    expect(a.jwtSecret).not.toBe(b.jwtSecret);
    expect(a.adminApiKey).not.toBe(b.adminApiKey);
  });
});

describe('TRUST_PROXY', () => {
  it('is off by default and takes true, a hop count or addresses/CIDRs', () => {
    expect(loadConfig(env({ NODE_ENV: 'test' })).config.trustProxy).toBe(false);
    expect(loadConfig(env({ NODE_ENV: 'test', TRUST_PROXY: 'true' })).config.trustProxy).toBe(true);
    expect(loadConfig(env({ NODE_ENV: 'test', TRUST_PROXY: '2' })).config.trustProxy).toBe(2);
    expect(loadConfig(env({ NODE_ENV: 'test', TRUST_PROXY: '10.0.0.0/8, loopback' })).config.trustProxy).toEqual(['10.0.0.0/8', 'loopback']);
  });
  it('refuses anything else, naming the variable', () => {
    expect(() => loadConfig(env({ NODE_ENV: 'test', TRUST_PROXY: 'proxy.internal' }))).toThrow(/TRUST_PROXY/);
  });
});

describe('LOG_FORMAT', () => {
  it('takes json or pretty; unset, it is json unless in development on a terminal (never in production or tests)', () => {
    expect(loadConfig(env({ LOG_FORMAT: 'pretty' })).config.logFormat).toBe('pretty');
    expect(loadConfig(env({ LOG_FORMAT: 'json' })).config.logFormat).toBe('json');
    expect(loadConfig(env({ NODE_ENV: 'production', ...SECRETS, ...SMTP })).config.logFormat).toBe('json');
    expect(loadConfig(env({ NODE_ENV: 'test' })).config.logFormat).toBe('json');
    expect(loadConfig(env()).config.logFormat).toBe(process.stdout.isTTY ? 'pretty' : 'json');
    expect(configErrorOf(env({ LOG_FORMAT: 'text' })).message).toBe('LOG_FORMAT: must be json or pretty, got "text"');
  });
});

describe('templates (docs/templates.md)', () => {
  it('TEMPLATE_BASE_DOMAIN defaults to localhost and must be a host name; the provisioner secret is required with its URL', () => {
    const base = env({ NODE_ENV: 'test' });
    expect(loadConfig(base).config).toMatchObject({ templateBaseDomain: 'localhost', templateProvisionerUrl: undefined, templateProvisionerSecret: undefined });
    expect(loadConfig(env({ NODE_ENV: 'test', TEMPLATE_BASE_DOMAIN: 'Apps.Example.com.' })).config.templateBaseDomain).toBe('apps.example.com');
    expect(configErrorOf(env({ NODE_ENV: 'test', TEMPLATE_BASE_DOMAIN: 'https://apps.example.com' })).variable).toBe('TEMPLATE_BASE_DOMAIN');
    const url = 'https://provisioner.example.com/deploy';
    expect(configErrorOf(env({ NODE_ENV: 'test', TEMPLATE_PROVISIONER_URL: url })).message).toBe(
      'TEMPLATE_PROVISIONER_SECRET: is required when TEMPLATE_PROVISIONER_URL is set',
    );
    expect(configErrorOf(env({ NODE_ENV: 'test', TEMPLATE_PROVISIONER_URL: url, TEMPLATE_PROVISIONER_SECRET: 'short' })).variable).toBe('TEMPLATE_PROVISIONER_SECRET');
    expect(configErrorOf(env({ NODE_ENV: 'test', TEMPLATE_PROVISIONER_URL: 'ftp://x', TEMPLATE_PROVISIONER_SECRET: 's'.repeat(24) })).variable).toBe('TEMPLATE_PROVISIONER_URL');
    const ok = loadConfig(env({ NODE_ENV: 'test', TEMPLATE_PROVISIONER_URL: url, TEMPLATE_PROVISIONER_SECRET: 's'.repeat(24) })).config;
    expect(ok).toMatchObject({ templateProvisionerUrl: url, templateProvisionerSecret: 's'.repeat(24) });
  });
});

describe('USAGE_RETENTION_DAYS', () => {
  it('unset keeps usage records forever; a whole number of at least 35 days is taken; less, or anything else, is refused by name', () => {
    expect(loadConfig(env({ ...SECRETS })).config.usageRetentionDays).toBeNull();
    expect(loadConfig(env({ ...SECRETS, USAGE_RETENTION_DAYS: '' })).config.usageRetentionDays).toBeNull();
    expect(loadConfig(env({ ...SECRETS, USAGE_RETENTION_DAYS: '400' })).config.usageRetentionDays).toBe(400);
    for (const bad of ['34', '0', '-1', '40.5', 'forever']) {
      expect(configErrorOf(env({ ...SECRETS, USAGE_RETENTION_DAYS: bad })).message).toContain('USAGE_RETENTION_DAYS');
    }
  });
});
