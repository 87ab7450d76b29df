import { hash } from 'node:crypto';

/**
 * JSON with object keys sorted at every depth, so equal values hash equally whatever their key order.
 * Keys whose value is undefined are left out (as JSON.stringify leaves them out); an undefined array
 * element is `null`. Every idempotent record hashes its request with this (a stored hash must stay
 * comparable), so its output must never change: src/lib/canonical-json.unit.test.ts holds it to the
 * plain definition.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i > 0 ? ',' : '') + canonicalJson(value[i]);
    return `${out}]`;
  }
  const object = value as Record<string, unknown>;
  // The default sort orders by UTF-16 code units, as `<` does.
  const keys = Object.keys(object).sort();
  let out = '{';
  for (const key of keys) {
    const v = object[key];
    if (v === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}${JSON.stringify(key)}:${canonicalJson(v)}`;
  }
  return `${out}}`;
}

export function requestHash(value: unknown): string {
  return hash('sha256', canonicalJson(value));
}
