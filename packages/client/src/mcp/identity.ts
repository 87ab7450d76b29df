import { createHash } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';
import { IDEMPOTENCY_META_KEYS, type ToolExtra } from './options.js';

export function sha256(value: string, encoding: 'hex' | 'base64url' = 'hex'): string {
  return createHash('sha256').update(value).digest(encoding);
}

/** JSON with sorted object keys, so the same arguments hash the same. */
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const keys = Object.keys(value as object).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

function idempotencyKeyOf(extra: ToolExtra): string | undefined {
  const meta = extra._meta as Record<string, unknown> | undefined;
  if (!meta) return undefined;
  for (const key of IDEMPOTENCY_META_KEYS) {
    const value = meta[key];
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

export function defaultUserId(extra: ToolExtra): string | undefined {
  const fromAuth = extra.authInfo?.extra as Record<string, unknown> | undefined;
  for (const key of ['userId', 'user_id', 'sub']) {
    const value = fromAuth?.[key];
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

/**
 * The client's idempotency key, scoped to the user, tool and arguments, so a retry of the same call
 * deducts once and the key cannot buy a different call; a new UUID v7 when the client sent none.
 */
export function invocationIdFor(toolName: string, args: unknown, extra: ToolExtra, userId: string | undefined): string {
  const key = idempotencyKeyOf(extra);
  if (!key) return uuidv7();
  return `mcp_${sha256(JSON.stringify([userId ?? '', toolName, canonical(args ?? null), key]), 'base64url')}`;
}
