import { createHash } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';
import { IDEMPOTENCY_META_KEYS, type ToolExtra } from './options.js';

export function sha256(value: string, encoding: 'hex' | 'base64url' = 'hex'): string {
  return createHash('sha256').update(value).digest(encoding);
}

/**
 * JSON with sorted object keys, so the same arguments hash the same. The arguments are the tool's
 * parsed ones, which a schema may have turned into objects that are not plain (`z.coerce.date()`): a
 * value with `toJSON` (Date, URL, Buffer) is named by it, as JSON.stringify names it; one with no JSON
 * form (a Map, a Set, a bigint, a class instance without toJSON) cannot be named, and `undefined`
 * says so. Named by its own keys, every Date would be `{}`, and one key would buy any other day.
 */
function canonical(value: unknown): string | undefined {
  if (typeof value === 'bigint') return undefined;
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return canonical(toJSON.call(value));
  if (Array.isArray(value)) {
    const items = value.map(canonical);
    return items.includes(undefined) ? undefined : `[${items.join(',')}]`;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return undefined;
  const parts: string[] = [];
  for (const k of Object.keys(value).sort()) {
    const item = canonical((value as Record<string, unknown>)[k]);
    if (item === undefined) return undefined;
    parts.push(`${JSON.stringify(k)}:${item}`);
  }
  return `{${parts.join(',')}}`;
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
 * deducts once and the key cannot buy a different call; a new UUID v7 when the client sent none, or
 * when the arguments cannot be named (canonical).
 */
export function invocationIdFor(toolName: string, args: unknown, extra: ToolExtra, userId: string | undefined): string {
  const key = idempotencyKeyOf(extra);
  if (!key) return uuidv7();
  // Arguments that cannot be named make no idempotent id: the call is a new one, charged as such.
  const named = canonical(args ?? null);
  if (named === undefined) return uuidv7();
  return `mcp_${sha256(JSON.stringify([userId ?? '', toolName, named, key]), 'base64url')}`;
}
