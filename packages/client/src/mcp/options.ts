import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { ClientOptions, CreditgateClient } from '../client.js';
import { type CreditgateError, isCreditgateError } from '../errors.js';
import type { RecordResult } from '../types.js';
import type { Outbox } from './outbox.js';
import type { MeteringRefusal } from './results.js';

export type ToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** What the middleware reports as it works (for logs, metrics and tests). */
export type MeteringEvent =
  | { type: 'allowed'; tool: string; invocationId: string; reserved: boolean }
  | { type: 'denied'; tool: string; reason: MeteringRefusal; userId?: string }
  | { type: 'unverified'; tool: string; invocationId: string; error: CreditgateError }
  | { type: 'recorded'; tool: string; invocationId: string; result: RecordResult }
  | { type: 'released'; tool: string; invocationId: string }
  | { type: 'queued'; tool: string; invocationId: string; error: CreditgateError }
  | { type: 'record_failed'; tool: string; invocationId: string; error: unknown }
  | { type: 'outbox_delivered'; invocationId: string; result: RecordResult }
  | { type: 'outbox_failed'; invocationId: string; reason: string };

export interface MeteringLogger {
  warn(message: string): void;
  error(message: string): void;
}

export interface MeteringOptions extends Omit<ClientOptions, 'cache'> {
  /** Stdio mode: the organization API key (scopes read and write). */
  apiKey?: string;
  /** Service mode: the shared service key; the user comes from the request's authInfo. */
  serviceKey?: string;
  /** Use this client instead of creating one (its credentials decide the mode). */
  client?: CreditgateClient;
  /** Hold the tool's cost during the call so recording cannot fail for balance (default true). */
  reserve?: boolean;
  /** When the platform cannot be reached: refuse the call (default) or run it and record later. */
  onOutage?: 'fail_closed' | 'fail_open';
  /**
   * Where usage that could not be sent waits: a directory (stdio default
   * `~/.creditgate/outbox/<key hash>`), an Outbox, or false. Service mode keeps it in memory by default.
   */
  outbox?: string | Outbox | false;
  /** How often the outbox is retried while it holds entries (default 30 s). */
  outboxIntervalMs?: number;
  /** Service mode: the end user's id from the request (default: authInfo.extra.userId, .user_id or .sub). */
  userId?: (extra: ToolExtra) => string | undefined;
  /** Tools that are free: not checked, not recorded. */
  exclude?: string[] | ((toolName: string) => boolean);
  /** Metadata stored with each usage record (≤ 16 KiB serialized). */
  metadata?: (call: { toolName: string; args: unknown; extra: ToolExtra }) => Record<string, unknown> | undefined;
  /**
   * Show each metered tool's price in tools/list (`_meta["io.creditgate/pricing"] = { credits, action }`),
   * revalidated at most every 5 minutes, with notifications/tools/list_changed when a price changes
   * (default true; docs/client.md, Prices in tools/list). The clock is the `now` option.
   */
  pricing?: boolean;
  /** Shown in denials for tier and credits (e.g. your pricing page). */
  upgradeUrl?: string;
  logger?: MeteringLogger;
  onEvent?: (event: MeteringEvent) => void;
}

/** `_meta` keys a client may send on tools/call to make a retried call idempotent. */
export const IDEMPOTENCY_META_KEYS = ['io.creditgate/idempotency-key', 'idempotency-key', 'idempotency_key', 'idempotencyKey'];

export const stderrLogger: MeteringLogger = {
  // Never stdout: a stdio MCP server's stdout is its protocol channel.
  warn: (message) => console.error(`[creditgate] ${message}`),
  error: (message) => console.error(`[creditgate] ${message}`),
};

/** The platform did not give an answer (or a transient one): the outage policy decides. */
export function isOutage(err: unknown): err is CreditgateError {
  return isCreditgateError(err) && (err.isTransient || err.code === 'INVALID_RESPONSE');
}
