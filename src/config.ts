import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import { makePrivateDir, PRIVATE_FILE_MODE, SECRETS_FILE } from './lib/data-dir.js';
import { TIERS, type Tier } from './lib/tiers.js';
import { classesByNormalisedName } from './modules/ai/models.js';

/**
 * Every environment variable the service reads, parsed and validated in one place.
 * A bad value stops the start with a message naming the variable (ConfigError).
 */
/** The embedded PGlite's shared_buffers unless configured (docs/operations-memory.md); PostgreSQL's default is 128 MB. */
export const DEFAULT_PGLITE_SHARED_BUFFERS_MB = 16;

export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  port: number;
  host: string;
  /** undefined = embedded PGlite in dataDir; 'memory://' = in-memory PGlite; else postgres URL */
  databaseUrl: string | undefined;
  dataDir: string;
  redisUrl: string | undefined;
  /**
   * Which proxies' X-Forwarded-For to believe for the client IP (rate limits and login limits key on it):
   * false (default: the socket's address), true (any), a hop count, or addresses/CIDRs (Fastify trustProxy).
   */
  trustProxy: boolean | number | string[];
  /** Prefix of every Redis key this service writes (rate-limit windows); instances that share limits share it. */
  redisPrefix: string;
  jwtSecret: string;
  mcpServiceKey: string;
  adminApiKey: string;
  /**
   * `Authorization: Bearer <METRICS_TOKEN>` opens GET /metrics (a scraper's credential, which opens
   * nothing else); unset: only X-Admin-Key opens it (docs/operations-metrics.md).
   */
  metricsToken: string | undefined;
  /** A second listener on 127.0.0.1 serving only GET /metrics without credentials; unset: none. */
  metricsPort: number | undefined;
  encryptionKey: string;
  publicBaseUrl: string;
  stripeSecretKey: string | undefined;
  stripeWebhookSecret: string | undefined;
  stripeApiBase: string | undefined;
  /** STRIPE_PRICE_TIERS (docs/billing.md, Configuration): subscription price id → the tier it buys. */
  stripePriceTiers: Record<string, Tier>;
  /** CREDIT_PACKS (docs/billing.md, Configuration): one-time packs, pack name → credits and the Stripe price that sells them. */
  creditPacks: Record<string, CreditPack>;
  /** docs/billing.md, Usage to Stripe meters: when set, successful deductions of subscribed organizations are reported to this Stripe meter. */
  stripeMeterEventName: string | undefined;
  /** The AI proxy's OpenAI-compatible upstream (docs/ai-proxy.md), as an OpenAI SDK's baseURL (https://api.openai.com/v1). */
  aiBaseUrl: string | undefined;
  aiApiKey: string | undefined;
  /** The model of /api/ai/generate. */
  aiDefaultModel: string;
  /** When non-empty, the only models the proxy accepts (and lists); else any model, listing the class map's. */
  aiModels: string[];
  /** Output allowance of a call that names no max_tokens (docs/ai-proxy.md, The output allowance: default 4,096). */
  aiMaxOutputTokens: number;
  /** An upstream that sends no headers, or no bytes of a stream, this long is cut (502). */
  aiTimeoutMs: number;
  /** Normalised model names (or prefixes before `-`) that take the allowance only as max_completion_tokens (docs/ai-proxy.md, Bounds). */
  aiReasoningModels: string[];
  /** Top-level request fields forwarded besides OpenAI's own (docs/ai-proxy.md, Bounds: fields). */
  aiExtraFields: string[];
  /** Prompt hold of one image for a model family without a known image rule (docs/ai-proxy.md, Bounds: images). */
  aiImageMaxTokens: number;
  /** When set, inline audio and files are held at bytes ÷ this, rounded up; unset they are refused (docs/ai-proxy.md). */
  aiBytesPerTokenBound: number | undefined;
  /** Connections to the upstream at most (a bounded pool); calls past it wait for one. */
  aiMaxConnections: number;
  smtpUrl: string | undefined;
  /**
   * 'on' (default): only a user whose address was proven by the mailed link accepts an invitation.
   * 'off': the signed-in user with the invited address accepts it unverified; the way to run in
   * production without SMTP_URL (docs/accounts.md, Email verification).
   */
  emailVerification: 'on' | 'off';
  webhookAllowPrivateNetworks: boolean;
  /** docs/webhooks.md: 10 s per webhook attempt. Not an environment variable; tests shorten it. */
  webhookAttemptTimeoutMs: number;
  /** docs/templates.md, Provisioners: deployment_url of the built-in provisioner is https://{subdomain}.{templateBaseDomain}. */
  templateBaseDomain: string;
  /** When set, template deployments are POSTed here, signed with templateProvisionerSecret (docs/templates.md). */
  templateProvisionerUrl: string | undefined;
  templateProvisionerSecret: string | undefined;
  /**
   * TEMPLATE_PROVISIONER_ALLOW_PRIVATE: the provisioner (operator configuration, not a tenant's URL) may
   * be on a loopback or private address; tenants' webhooks stay behind the guard (docs/templates.md).
   */
  templateProvisionerAllowPrivate: boolean;
  /** TEMPLATE_RESERVED_SUBDOMAINS: refused as subdomains on top of the built-in list (docs/templates.md). */
  templateReservedSubdomains: string[];
  /** DNS_SERVERS: the resolvers of custom-domain verification, `ip` or `ip:port` (`[v6]:port`); empty = the system's. */
  dnsServers: string[];
  /** 5 s per verification lookup (docs/templates.md). Not an environment variable; tests shorten it. */
  dnsTimeoutMs: number;
  newOrgTier: Tier;
  logLevel: string;
  /** LOG_FORMAT: `pretty` (one line per request, for a person) or `json`; default pretty only in development on a terminal. */
  logFormat: 'json' | 'pretty';
  /** Size of the pg pool (PostgreSQL only). */
  databasePoolSize: number;
  /** DATABASE_PREPARED_STATEMENTS: named prepared statements on PostgreSQL; false behind a pooler that cannot keep them (docs/operations.md, "PgBouncer"). */
  databasePreparedStatements: boolean;
  /** shared_buffers of the embedded PGlite, in MB (docs/operations-memory.md); PostgreSQL ignores it. */
  pgliteSharedBuffersMb: number;
  /** Group commit of deductions (docs/adr/0004-group-commit.md): wait for company, batch size, batches in flight. */
  deductBatchWindowMs: number;
  deductBatchMax: number;
  deductBatchInFlight: number;
  /** Usage records older than this many days are deleted (their rollups stay); null keeps them forever (docs/usage-analytics.md, Retention). */
  usageRetentionDays: number | null;
  /** How long a batch remembers the balance rows it committed, to write the next batch on them in one round trip (0: never). */
  deductBatchRememberMs: number;
  /** In-process cache of API keys and deployments, dropped on every instance through the bus (docs/adr/0005-cached-checks.md). */
  principalCacheMs: number;
  /** How stale a balance an advisory check reads may be (docs/adr/0005-cached-checks.md); 0 reads it every time. */
  balanceCacheMs: number;
  /** scrypt cost as log2(N); 17 is the OWASP recommendation and the production minimum. */
  passwordHashLogN: number;
  /** docs/ai-proxy.md, Model classes: model name → class for AI tokens paid with purchased credits; unlisted models use aiDefaultModelClass. */
  aiModelClasses: Record<string, ModelClass>;
  aiDefaultModelClass: ModelClass;
  /**
   * Where the shared rate limiter takes its time: 'redis' (Redis TIME, one clock for every instance) in
   * production; 'clock' (the app's clock) lets tests move time. Not an environment variable.
   */
  rateLimitTime: 'redis' | 'clock';
  /** REDIS_COMMAND_TIMEOUT_MS: how long the rate limiter waits for Redis before it counts per instance (docs/limits.md). */
  redisCommandTimeoutMs: number;
}

export interface CreditPack {
  credits: number;
  priceId: string;
}

export const MODEL_CLASSES = ['standard', 'advanced', 'premium'] as const;
export type ModelClass = (typeof MODEL_CLASSES)[number];

/** Defaults for AI_MODEL_CLASSES; an operator lists their provider's models to change them. */
export const DEFAULT_MODEL_CLASSES: Record<string, ModelClass> = {
  'gpt-4o-mini': 'standard',
  'gpt-4.1-mini': 'standard',
  'gpt-4.1-nano': 'standard',
  'gpt-4o': 'advanced',
  'gpt-4.1': 'advanced',
  o1: 'premium',
  o3: 'premium',
  // Matched on the normalised name (docs/ai-proxy.md, Model classes): the embedding models are cheap;
  // anything this map does not place is AI_DEFAULT_MODEL_CLASS (premium unless set).
  'text-embedding-3-small': 'standard',
  'text-embedding-3-large': 'standard',
  'text-embedding-ada-002': 'standard',
};

/**
 * Defaults for AI_REASONING_MODELS: normalised names (and their `-…` and `.…` variants) that refuse `max_tokens`
 * and spend hidden reasoning tokens (docs/ai-proxy.md, Bounds: output allowance).
 */
export const DEFAULT_REASONING_MODELS = ['o1', 'o3', 'o4', 'gpt-5', 'codex-mini'];

/** Default for AI_IMAGE_MAX_TOKENS: above every published per-image maximum but gpt-4o-mini's (docs/ai-proxy.md). */
export const DEFAULT_IMAGE_MAX_TOKENS = 16_384;

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

const SECRET_NAMES = ['JWT_SECRET', 'MCP_SERVICE_KEY', 'ADMIN_API_KEY', 'ENCRYPTION_KEY'] as const;
type SecretName = (typeof SECRET_NAMES)[number];

function str(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = str(env, name);
  if (raw === undefined) return fallback;
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError(name, `must be true or false, got "${raw}"`);
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, 'must be a URL');
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must use one of ${protocols.join(', ')}`);
  }
  return raw;
}

/** `TRUST_PROXY`: true/false, a hop count, or a comma-separated list of proxy addresses or CIDRs. */
function trustProxy(env: Env, name: string): boolean | number | string[] {
  const raw = str(env, name);
  if (raw === undefined || raw === 'false') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  const list = raw.split(',').map((x) => x.trim()).filter(Boolean);
  for (const entry of list) {
    if (!/^[0-9a-fA-F:.]+(\/\d{1,3})?$/.test(entry) && !['loopback', 'linklocal', 'uniquelocal'].includes(entry)) {
      throw new ConfigError(name, `must be true, false, a hop count, or addresses/CIDRs separated by commas, got "${entry}"`);
    }
  }
  return list;
}

/**
 * `AI_MODEL_CLASSES=model=class,model=class` (classes: standard, advanced, premium). The keys are kept as
 * written (the models `GET /models` lists, matched first on the raw name) and matched on their
 * normalised names like a caller's model (docs/ai-proxy.md, Model classes): two keys that normalise to
 * one name would leave one of them dead, so they are refused here.
 */
function modelClasses(env: Env, name: string): Record<string, ModelClass> | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  const out: Record<string, ModelClass> = {};
  for (const part of raw.split(',')) {
    const [model, cls] = part.split('=').map((x) => x.trim());
    if (!model || !cls || !(MODEL_CLASSES as readonly string[]).includes(cls)) {
      throw new ConfigError(name, `must be model=class pairs separated by commas (classes: ${MODEL_CLASSES.join(', ')}), got "${part}"`);
    }
    if (Object.hasOwn(out, model)) throw new ConfigError(name, `lists "${model}" twice; list it once`);
    out[model] = cls as ModelClass;
  }
  const [collision] = classesByNormalisedName(out, MODEL_CLASSES).collisions;
  if (collision) {
    const [first, second, normalised] = collision;
    throw new ConfigError(name, `"${first}" and "${second}" both name the model "${normalised}" (keys are matched on the normalised name: docs/ai-proxy.md, Model classes); list it once`);
  }
  return out;
}

function modelClass(env: Env, name: string): ModelClass {
  // Unset: premium, the safe side for a model the class map does not place (docs/ai-proxy.md, Model classes).
  const raw = str(env, name) ?? 'premium';
  if (!(MODEL_CLASSES as readonly string[]).includes(raw)) throw new ConfigError(name, `must be one of ${MODEL_CLASSES.join(', ')}`);
  return raw as ModelClass;
}

function secret(env: Env, name: SecretName, minLength: number): string | undefined {
  const raw = str(env, name);
  if (raw !== undefined && raw.length < minLength) {
    throw new ConfigError(name, `must be at least ${minLength} characters`);
  }
  return raw;
}

export interface LoadedConfig {
  config: Config;
  /** Secrets generated for development because they were missing (printed once at start). */
  generated: Partial<Record<SecretName, string>>;
}

const PRICE_ID = /^[A-Za-z0-9_]{1,100}$/;

/** `price_a=launch,price_b=growth` (docs/billing.md, Configuration). */
function priceTiers(env: Env, name: string): Record<string, Tier> {
  const map: Record<string, Tier> = {};
  for (const entry of list(env, name)) {
    const [price, tier, ...rest] = entry.split('=').map((p) => p.trim());
    if (!price || !tier || rest.length > 0 || !PRICE_ID.test(price)) {
      throw new ConfigError(name, `expected price_id=tier pairs separated by commas, got "${entry}"`);
    }
    if (!TIERS.includes(tier as Tier)) throw new ConfigError(name, `"${tier}" is not a tier (${TIERS.join(', ')})`);
    if (map[price]) throw new ConfigError(name, `${price} is listed twice`);
    map[price] = tier as Tier;
  }
  return map;
}

/** `small=1000:price_a,large=10000:price_b` (docs/billing.md, Configuration): pack name = credits : price. */
function creditPacks(env: Env, name: string): Record<string, CreditPack> {
  const packs: Record<string, CreditPack> = {};
  for (const entry of list(env, name)) {
    const match = /^([a-z0-9][a-z0-9_-]{0,39})=(\d{1,10}):([A-Za-z0-9_]{1,100})$/.exec(entry.trim());
    if (!match) throw new ConfigError(name, `expected name=credits:price_id entries separated by commas, got "${entry}"`);
    const [, pack, credits, priceId] = match as unknown as [string, string, string, string];
    const amount = Number(credits);
    if (amount < 1 || amount > 1_000_000_000) throw new ConfigError(name, `${pack}: credits must be between 1 and 1000000000`);
    if (packs[pack]) throw new ConfigError(name, `${pack} is listed twice`);
    packs[pack] = { credits: amount, priceId };
  }
  return packs;
}

/** A bearer credential for scrapers: long enough not to be guessed, and a single header-safe token. */
function metricsToken(env: Env, name: string): string | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  if (raw.length < 24) throw new ConfigError(name, 'must be at least 24 characters');
  if (!/^[\x21-\x7e]+$/.test(raw)) throw new ConfigError(name, 'must be printable ASCII without spaces (it is sent as a Bearer token)');
  return raw;
}

function onOff(env: Env, name: string, fallback: 'on' | 'off'): 'on' | 'off' {
  const raw = str(env, name);
  if (raw === undefined) return fallback;
  if (raw !== 'on' && raw !== 'off') throw new ConfigError(name, `must be on or off, got "${raw}"`);
  return raw;
}

/**
 * Without SMTP, no verification link reaches anyone in production (there is no local mailbox there),
 * so invitations could never be accepted: refuse to start unless verification is turned off on purpose
 * (docs/accounts.md, Email verification).
 */
function emailVerification(env: Env, nodeEnv: Config['nodeEnv'], smtpUrl: string | undefined): Config['emailVerification'] {
  const mode = onOff(env, 'EMAIL_VERIFICATION', 'on');
  if (nodeEnv === 'production' && smtpUrl === undefined && mode === 'on') {
    throw new ConfigError(
      'SMTP_URL',
      'is required when NODE_ENV=production, or verification links cannot be mailed and no invitation could be accepted; set SMTP_URL, or set EMAIL_VERIFICATION=off to let the signed-in user with the invited address accept unverified',
    );
  }
  return mode;
}

/** Pretty lines are for a person at a terminal in development; production, pipes and files get JSON. */
function logFormat(env: Env, name: string, nodeEnv: Config['nodeEnv']): Config['logFormat'] {
  const raw = str(env, name);
  if (raw === undefined) return nodeEnv === 'development' && process.stdout.isTTY === true ? 'pretty' : 'json';
  if (raw !== 'json' && raw !== 'pretty') throw new ConfigError(name, `must be json or pretty, got "${raw}"`);
  return raw;
}

function meterEventName(env: Env, name: string): string | undefined {
  const raw = str(env, name);
  if (raw !== undefined && !/^[A-Za-z0-9_.:-]{1,100}$/.test(raw)) throw new ConfigError(name, 'must be a Stripe meter event name (1–100 of A-Z a-z 0-9 _ . : -)');
  return raw;
}

/** A DNS name: dot-separated labels of a-z, 0-9 and inner hyphens (stored in lower case). */
export const HOST_NAME_RE = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

function hostName(env: Env, name: string, fallback: string): string {
  const raw = str(env, name)?.toLowerCase().replace(/\.$/, '');
  if (raw === undefined) return fallback;
  if (!HOST_NAME_RE.test(raw)) throw new ConfigError(name, `must be a host name such as apps.example.com, got "${raw}"`);
  return raw;
}

/** The provisioner's signing secret: required with TEMPLATE_PROVISIONER_URL, as long as a webhook secret at least. */
function provisionerSecret(env: Env, name: string, urlName: string): string | undefined {
  const raw = str(env, name);
  if (raw === undefined && str(env, urlName) !== undefined) throw new ConfigError(name, `is required when ${urlName} is set`);
  if (raw !== undefined && (raw.length < 24 || raw.length > 256)) throw new ConfigError(name, 'must be 24 to 256 characters');
  return raw;
}

/** A comma list in lower case; undefined when the variable is unset or empty (docker-compose passes empty ones). */
function lowerList(env: Env, name: string): string[] | undefined {
  return str(env, name) === undefined ? undefined : list(env, name).map((e) => e.toLowerCase());
}

function positiveNumber(env: Env, name: string): number | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || value > 1_000_000) throw new ConfigError(name, `must be a number above 0 and at most 1000000, got "${raw}"`);
  return value;
}

/** `TEMPLATE_RESERVED_SUBDOMAINS=shop,portal`: each must be a possible subdomain (the slug rule), stored lower case. */
function reservedSubdomains(env: Env, name: string): string[] {
  const names = list(env, name).map((e) => e.toLowerCase());
  const bad = names.find((e) => !/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/.test(e));
  if (bad !== undefined) throw new ConfigError(name, `must be subdomains (a-z, 0-9, inner hyphens) separated by commas, got "${bad}"`);
  return names;
}

/** `DNS_SERVERS=1.1.1.1,9.9.9.9:53,[2606:4700:4700::1111]:53`: addresses, not names (a resolver cannot resolve its own name). */
function dnsServers(env: Env, name: string): string[] {
  const servers = list(env, name);
  for (const server of servers) {
    const match = /^(?:\[([0-9a-fA-F:.]+)\]|(\d{1,3}(?:\.\d{1,3}){3}))(?::(\d{1,5}))?$/.exec(server) ?? (isIP(server) === 6 ? [server, server] : null);
    const address = match?.[1] ?? match?.[2];
    const port = match?.[3] === undefined ? 53 : Number(match[3]);
    if (!address || isIP(address) === 0 || port < 1 || port > 65535) {
      throw new ConfigError(name, `must be IP addresses, each optionally with :port ([v6]:port), separated by commas, got "${server}"`);
    }
  }
  return servers;
}

function list(env: Env, name: string): string[] {
  return (str(env, name) ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
}

/**
 * Parse the environment. In production the four secrets are required; elsewhere a missing one is
 * generated once and kept in DATA_DIR/secrets.json so restarts keep working keys.
 */
export function loadConfig(env: Env = process.env): LoadedConfig {
  const nodeEnvRaw = str(env, 'NODE_ENV') ?? 'development';
  if (!['development', 'production', 'test'].includes(nodeEnvRaw)) {
    throw new ConfigError('NODE_ENV', 'must be development, production or test');
  }
  const nodeEnv = nodeEnvRaw as Config['nodeEnv'];
  const databaseUrl = str(env, 'DATABASE_URL');
  if (databaseUrl !== undefined && databaseUrl !== 'memory://') {
    url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']);
  }
  const newOrgTier = str(env, 'NEW_ORG_TIER') ?? 'sandbox';
  if (!TIERS.includes(newOrgTier as Tier)) {
    throw new ConfigError('NEW_ORG_TIER', `must be one of ${TIERS.join(', ')}`);
  }
  const dataDir = resolve(str(env, 'DATA_DIR') ?? './.creditgate');
  const port = int(env, 'PORT', 8080, 0, 65535);
  const host = str(env, 'HOST') ?? '127.0.0.1';
  const metricsPort = str(env, 'METRICS_PORT') === undefined ? undefined : int(env, 'METRICS_PORT', 0, 1, 65535);
  if (metricsPort !== undefined && metricsPort === port) throw new ConfigError('METRICS_PORT', `must differ from PORT (${port})`);

  const secrets: Partial<Record<SecretName, string>> = {
    JWT_SECRET: secret(env, 'JWT_SECRET', 32),
    MCP_SERVICE_KEY: secret(env, 'MCP_SERVICE_KEY', 24),
    ADMIN_API_KEY: secret(env, 'ADMIN_API_KEY', 24),
    ENCRYPTION_KEY: secret(env, 'ENCRYPTION_KEY', 32),
  };
  const missing = SECRET_NAMES.filter((name) => secrets[name] === undefined);
  const generated: Partial<Record<SecretName, string>> = {};
  if (missing.length > 0) {
    if (nodeEnv === 'production') {
      throw new ConfigError(missing[0]!, 'is required when NODE_ENV=production');
    }
    const stored = readStoredSecrets(dataDir);
    for (const name of missing) {
      const value = stored[name] ?? randomBytes(32).toString('base64url');
      if (stored[name] === undefined) generated[name] = value;
      stored[name] = value;
      secrets[name] = value;
    }
    if (Object.keys(generated).length > 0) writeStoredSecrets(dataDir, stored);
  }
  const smtpUrl = url(env, 'SMTP_URL', ['smtp:', 'smtps:']);

  const config: Config = {
    nodeEnv,
    port,
    host,
    databaseUrl,
    dataDir,
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    redisPrefix: str(env, 'REDIS_PREFIX') ?? 'cg:',
    trustProxy: trustProxy(env, 'TRUST_PROXY'),
    jwtSecret: secrets.JWT_SECRET!,
    mcpServiceKey: secrets.MCP_SERVICE_KEY!,
    adminApiKey: secrets.ADMIN_API_KEY!,
    encryptionKey: secrets.ENCRYPTION_KEY!,
    metricsToken: metricsToken(env, 'METRICS_TOKEN'),
    metricsPort,
    publicBaseUrl: (url(env, 'PUBLIC_BASE_URL', ['http:', 'https:']) ?? `http://${host}:${port}`).replace(/\/$/, ''),
    stripeSecretKey: str(env, 'STRIPE_SECRET_KEY'),
    stripeWebhookSecret: str(env, 'STRIPE_WEBHOOK_SECRET'),
    stripeApiBase: url(env, 'STRIPE_API_BASE', ['http:', 'https:']),
    stripePriceTiers: priceTiers(env, 'STRIPE_PRICE_TIERS'),
    creditPacks: creditPacks(env, 'CREDIT_PACKS'),
    stripeMeterEventName: meterEventName(env, 'STRIPE_METER_EVENT_NAME'),
    aiBaseUrl: url(env, 'AI_BASE_URL', ['http:', 'https:']),
    aiApiKey: str(env, 'AI_API_KEY'),
    aiDefaultModel: str(env, 'AI_DEFAULT_MODEL') ?? 'gpt-4o-mini',
    aiModels: list(env, 'AI_MODELS'),
    aiMaxOutputTokens: int(env, 'AI_MAX_OUTPUT_TOKENS', 4096, 1, 1_000_000),
    aiTimeoutMs: int(env, 'AI_TIMEOUT_MS', 600_000, 100, 3_600_000),
    aiMaxConnections: int(env, 'AI_MAX_CONNECTIONS', 64, 1, 10_000),
    aiReasoningModels: lowerList(env, 'AI_REASONING_MODELS') ?? DEFAULT_REASONING_MODELS,
    aiExtraFields: list(env, 'AI_EXTRA_FIELDS'),
    aiImageMaxTokens: int(env, 'AI_IMAGE_MAX_TOKENS', DEFAULT_IMAGE_MAX_TOKENS, 1, 1_000_000),
    aiBytesPerTokenBound: positiveNumber(env, 'AI_BYTES_PER_TOKEN_BOUND'),
    smtpUrl,
    emailVerification: emailVerification(env, nodeEnv, smtpUrl),
    webhookAllowPrivateNetworks: bool(env, 'WEBHOOK_ALLOW_PRIVATE_NETWORKS', false),
    webhookAttemptTimeoutMs: 10_000,
    templateBaseDomain: hostName(env, 'TEMPLATE_BASE_DOMAIN', 'localhost'),
    templateProvisionerUrl: url(env, 'TEMPLATE_PROVISIONER_URL', ['http:', 'https:']),
    templateProvisionerSecret: provisionerSecret(env, 'TEMPLATE_PROVISIONER_SECRET', 'TEMPLATE_PROVISIONER_URL'),
    templateProvisionerAllowPrivate: bool(env, 'TEMPLATE_PROVISIONER_ALLOW_PRIVATE', false),
    templateReservedSubdomains: reservedSubdomains(env, 'TEMPLATE_RESERVED_SUBDOMAINS'),
    dnsServers: dnsServers(env, 'DNS_SERVERS'),
    dnsTimeoutMs: 5_000,
    newOrgTier: newOrgTier as Tier,
    logLevel: str(env, 'LOG_LEVEL') ?? (nodeEnv === 'test' ? 'silent' : 'info'),
    logFormat: logFormat(env, 'LOG_FORMAT', nodeEnv),
    databasePoolSize: int(env, 'DATABASE_POOL_SIZE', 20, 1, 1000),
    databasePreparedStatements: bool(env, 'DATABASE_PREPARED_STATEMENTS', true),
    pgliteSharedBuffersMb: int(env, 'PGLITE_SHARED_BUFFERS_MB', DEFAULT_PGLITE_SHARED_BUFFERS_MB, 1, 4096),
    deductBatchWindowMs: int(env, 'DEDUCT_BATCH_WINDOW_MS', 0, 0, 100),
    deductBatchMax: int(env, 'DEDUCT_BATCH_MAX', 256, 1, 10_000),
    deductBatchInFlight: int(env, 'DEDUCT_BATCH_IN_FLIGHT', 1, 1, 1000),
    usageRetentionDays: str(env, 'USAGE_RETENTION_DAYS') === undefined ? null : int(env, 'USAGE_RETENTION_DAYS', 0, 35, 36_500),
    deductBatchRememberMs: int(env, 'DEDUCT_BATCH_REMEMBER_MS', 60_000, 0, 3_600_000),
    principalCacheMs: int(env, 'PRINCIPAL_CACHE_MS', 60_000, 0, 3_600_000),
    balanceCacheMs: int(env, 'BALANCE_CACHE_MS', 1_000, 0, 60_000),
    passwordHashLogN: int(env, 'PASSWORD_HASH_LOG_N', 17, nodeEnv === 'production' ? 17 : 10, 20),
    aiModelClasses: modelClasses(env, 'AI_MODEL_CLASSES') ?? DEFAULT_MODEL_CLASSES,
    aiDefaultModelClass: modelClass(env, 'AI_DEFAULT_MODEL_CLASS'),
    rateLimitTime: 'redis',
    redisCommandTimeoutMs: int(env, 'REDIS_COMMAND_TIMEOUT_MS', 250, 10, 60_000),
  };
  return { config, generated };
}

function secretsFile(dataDir: string): string {
  return join(dataDir, SECRETS_FILE);
}

function readStoredSecrets(dataDir: string): Partial<Record<SecretName, string>> {
  const file = secretsFile(dataDir);
  if (!existsSync(file)) return {};
  return JSON.parse(readFileSync(file, 'utf8')) as Partial<Record<SecretName, string>>;
}

function writeStoredSecrets(dataDir: string, secrets: Partial<Record<SecretName, string>>): void {
  // docs/accounts.md, Account safety: DATA_DIR is created 0700; an existing one is tightened (and logged) when the database opens.
  makePrivateDir(dataDir);
  writeFileSync(secretsFile(dataDir), `${JSON.stringify(secrets, null, 2)}\n`, { mode: PRIVATE_FILE_MODE });
  // `mode` applies only when the file is created: a file that already existed is made owner-only here.
  chmodSync(secretsFile(dataDir), PRIVATE_FILE_MODE);
}

const TEST_REDIS_PREFIX = `cg-test:${process.pid}:${randomBytes(4).toString('hex')}:`;

/** A complete configuration for tests and tools, with fixed secrets; override what you need. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    nodeEnv: 'test',
    port: 0,
    host: '127.0.0.1',
    databaseUrl: 'memory://',
    dataDir: resolve('./.creditgate-test'),
    redisUrl: undefined,
    // Runs share the Redis server and the tests' fixed start date: each test file counts in its own keys.
    redisPrefix: TEST_REDIS_PREFIX,
    trustProxy: false,
    jwtSecret: 'test-jwt-secret-that-is-long-enough-0123456789',
    mcpServiceKey: 'test-mcp-service-key-0123456789',
    adminApiKey: 'test-admin-api-key-0123456789',
    encryptionKey: 'test-encryption-key-0123456789-abcdefghij',
    metricsToken: undefined,
    metricsPort: undefined,
    publicBaseUrl: 'http://creditgate.test',
    stripeSecretKey: undefined,
    stripeWebhookSecret: undefined,
    stripeApiBase: undefined,
    stripePriceTiers: {},
    creditPacks: {},
    stripeMeterEventName: undefined,
    aiBaseUrl: undefined,
    aiApiKey: undefined,
    aiDefaultModel: 'gpt-4o-mini',
    aiModels: [],
    aiMaxOutputTokens: 4096,
    aiTimeoutMs: 30_000,
    aiMaxConnections: 16,
    aiReasoningModels: DEFAULT_REASONING_MODELS,
    aiExtraFields: [],
    aiImageMaxTokens: DEFAULT_IMAGE_MAX_TOKENS,
    aiBytesPerTokenBound: undefined,
    smtpUrl: undefined,
    emailVerification: 'on',
    webhookAllowPrivateNetworks: false,
    webhookAttemptTimeoutMs: 10_000,
    templateBaseDomain: 'localhost',
    templateProvisionerUrl: undefined,
    templateProvisionerSecret: undefined,
    templateProvisionerAllowPrivate: false,
    templateReservedSubdomains: [],
    dnsServers: [],
    dnsTimeoutMs: 5_000,
    newOrgTier: 'sandbox',
    logLevel: 'silent',
    logFormat: 'json',
    databasePoolSize: 10,
    databasePreparedStatements: true,
    pgliteSharedBuffersMb: DEFAULT_PGLITE_SHARED_BUFFERS_MB,
    deductBatchWindowMs: 0,
    deductBatchMax: 256,
    deductBatchInFlight: 4,
    usageRetentionDays: null,
    deductBatchRememberMs: 60_000,
    principalCacheMs: 60_000,
    balanceCacheMs: 1_000,
    // Cheap hashes keep the suite fast; the scrypt code path is the same.
    passwordHashLogN: 10,
    aiModelClasses: DEFAULT_MODEL_CLASSES,
    // As in production: an unplaced model bills at the dearest class (docs/ai-proxy.md, Model classes).
    aiDefaultModelClass: 'premium',
    // Tests move the app's clock; the shared limiter follows it.
    rateLimitTime: 'clock',
    redisCommandTimeoutMs: 250,
    ...overrides,
  };
}
