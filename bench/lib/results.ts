import type { Measurement } from './load.js';
import type { PgPerRequest } from './postgres.js';

/** What one `npm run bench` records (bench/results/latest.json) and docs/benchmarks.md is rendered from. */
export type Storage = 'postgres' | 'pglite';
export type BaselineName = 'hello' | 'select' | 'update' | 'hot';
export type Endpoint = 'check' | 'record' | 'usage';
export type Spread = 'many' | 'hot';

export interface BaselineResult {
  name: BaselineName;
  throughput: Measurement;
  /** Latency of the baseline itself at half its own throughput (select and update only). */
  fixed?: Measurement;
  pg?: PgPerRequest;
}

export interface Accounting {
  /** Answers of this scenario that were 2xx and allowed/deducted (warm-up, throughput and fixed-load runs). */
  successes: number;
  /** Growth of successful usage records, ledger deductions and spent credits over the scenario. */
  usageRecords: number;
  ledgerDeducts: number;
  creditsSpent: number;
  failedUsageRecords: number;
  /** findLedgerMismatches(db).length after the scenario. */
  mismatches: number;
  /** Requests without an answer at the client (timeouts, connection errors): each may or may not have been recorded. */
  unanswered: number;
  /** The records equal the counted answers exactly. */
  exact: boolean;
  /** Ledger, balances and usage records agree, and the records are the counted answers plus at most the unanswered requests. */
  ok: boolean;
}

export interface ScenarioResult {
  endpoint: Endpoint;
  spread: Spread;
  baseline: BaselineName;
  /**
   * The matching baseline's throughput the ratio is taken against: the paired measurement when there is
   * one (runs from 2026-11-26 evening on), else the baseline table's.
   */
  baselineRps: number;
  /** The matching baseline's row in the baselines table, measured before any scenario. */
  firstBaselineRps?: number;
  /** The matching baseline measured again right before this scenario (same server, seconds apart). */
  pairedBaseline?: Measurement;
  targetRatio: number;
  throughput: Measurement;
  fixed: Measurement;
  accounting: Accounting;
  pg?: PgPerRequest;
}

export interface StorageResult {
  storage: Storage;
  baselines: BaselineResult[];
  tenants: number;
  seedMs: number;
  scenarios: ScenarioResult[];
}

export interface Machine {
  cpus: number;
  cpuModel: string;
  memoryGb: number;
  node: string;
  postgres: string;
  os: string;
  /** 1-minute load average and vitest processes seen when the run started (other work on the machine). */
  loadAtStart: number;
  vitestAtStart: number;
  /** 1-minute load average at the end, and the most vitest processes seen before any measurement. */
  loadAtEnd: number;
  vitestMax: number;
}

export interface Settings {
  connections: number;
  seconds: number;
  warmupSeconds: number;
  tenants: number;
  poolSize: number;
  /** Offered load of the fixed-load runs as a fraction of the matching baseline's throughput. */
  fixedLoadFraction: number;
  /** How the servers ran: tsc's output (bench/lib/child.ts, from 2026-11-27) or under tsx (results without it). */
  runtime?: 'compiled' | 'tsx';
}

export interface Results {
  date: string;
  /** The code measured: HEAD and whether src/ or migrations/ had uncommitted changes. */
  git: { commit: string; dirty: boolean };
  durationSeconds: number;
  machine: Machine;
  settings: Settings;
  storages: StorageResult[];
}

/** The targets (docs/benchmarks.md, Method), on PostgreSQL: share of the matching baseline's throughput, and p99 at the fixed load. */
/**
 * docs/benchmarks.md, Method: check-entitlement ≥ 1.0× the one-SELECT route; record-usage (and service usage) over many
 * deployments ≥ 1.0× the one-UPDATE route; one hot deployment ≥ 2.0× the naive hot-row route.
 */
export const TARGET_RATIO: Record<Endpoint, Record<Spread, number>> = {
  check: { many: 1, hot: 1 },
  record: { many: 1, hot: 2 },
  usage: { many: 1, hot: 2 },
};
export const MATCHING_BASELINE: Record<Endpoint, Record<Spread, BaselineName>> = {
  check: { many: 'select', hot: 'select' },
  record: { many: 'update', hot: 'hot' },
  usage: { many: 'update', hot: 'hot' },
};
export const TARGET_P99_MS = 15;
