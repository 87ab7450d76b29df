import { invalidParam } from './errors.js';

/**
 * A form body as the Stripe SDK encodes it, bracket notation unfolded:
 * `line_items[0][price]=price_x&metadata[org]=o` → `{ line_items: { '0': { price: 'price_x' } }, metadata: { org: 'o' } }`.
 * Objects have no prototype, so `__proto__` is an ordinary key.
 */
export type FormValue = string | FormObject;
export interface FormObject {
  [key: string]: FormValue;
}

/** Which parameters a route accepts: `true` a scalar, a nested tree, or `'hash'` for free keys (metadata). */
export type Allowed = { [key: string]: true | 'hash' | Allowed };

export function parseForm(body: string): FormObject {
  const root: FormObject = Object.create(null);
  for (const [key, value] of new URLSearchParams(body)) assignPath(root, paramPath(key), value, key);
  return root;
}

/** `a[b][0]` → `['a', 'b', '0']`; an empty `[]` means "the next index". */
export function paramPath(param: string): string[] {
  const match = /^([^[\]]+)((?:\[[^[\]]*\])*)$/.exec(param);
  if (!match) throw invalidParam(param, `Invalid parameter name: ${param}`);
  const nested = [...(match[2] ?? '').matchAll(/\[([^[\]]*)\]/g)].map((m) => m[1] ?? '');
  return [match[1] ?? '', ...nested];
}

function assignPath(root: FormObject, path: string[], value: string, param: string): void {
  let node = root;
  for (const [i, raw] of path.entries()) {
    const segment = raw === '' ? String(Object.keys(node).length) : raw;
    const existing = node[segment];
    if (i === path.length - 1) {
      if (existing !== undefined && typeof existing !== 'string') throw invalidParam(param, `Invalid value for ${param}: expected an object`);
      node[segment] = value;
      return;
    }
    if (typeof existing === 'string') throw invalidParam(param, `Invalid value for ${param}: ${path.slice(0, i + 1).join('.')} is not an object`);
    const child: FormObject = existing ?? Object.create(null);
    node[segment] = child;
    node = child;
  }
}

/** The value at a Stripe parameter name (`'line_items[0][price]'`), or undefined. */
export function valueAt(form: FormObject, param: string): FormValue | undefined {
  let node: FormValue | undefined = form;
  for (const segment of paramPath(param)) {
    if (node === undefined || typeof node === 'string') return undefined;
    node = node[segment];
  }
  return node;
}

export function text(form: FormObject, param: string): string | undefined {
  const value = valueAt(form, param);
  if (value !== undefined && typeof value !== 'string') throw invalidParam(param, `Invalid string: ${param} must be a string`);
  return value;
}

export function requiredText(form: FormObject, param: string): string {
  const value = text(form, param);
  if (value === undefined || value === '') throw invalidParam(param, `Missing required param: ${param}.`, 'parameter_missing');
  return value;
}

export function integer(form: FormObject, param: string): number | undefined {
  const value = text(form, param);
  if (value === undefined) return undefined;
  if (!/^-?\d{1,15}$/.test(value)) throw invalidParam(param, `Invalid integer: ${value}`, 'parameter_invalid_integer');
  return Number(value);
}

export function boolean(form: FormObject, param: string): boolean | undefined {
  const value = text(form, param);
  if (value === undefined) return undefined;
  if (value !== 'true' && value !== 'false') throw invalidParam(param, `Invalid boolean: ${value}`);
  return value === 'true';
}

/** One of `choices`, or a 400 listing them. */
export function oneOf<T extends string>(form: FormObject, param: string, choices: readonly T[]): T | undefined {
  const value = text(form, param);
  if (value === undefined) return undefined;
  if (!(choices as readonly string[]).includes(value)) throw invalidParam(param, `Invalid ${param}: must be one of ${choices.join(', ')}`);
  return value as T;
}

/** A flat string map (`payload[...]`), or undefined when absent. */
export function stringMap(form: FormObject, param: string): Record<string, string> | undefined {
  const value = valueAt(form, param);
  if (value === undefined || value === '') return value === '' ? {} : undefined;
  if (typeof value === 'string') throw invalidParam(param, `Invalid object: ${param} must be a hash`);
  const entries = Object.entries(value).map(([key, entry]) => {
    if (typeof entry !== 'string') throw invalidParam(`${param}[${key}]`, `Invalid string: ${param}[${key}] must be a string`);
    return [key, entry] as const;
  });
  // fromEntries defines own properties, so a `__proto__` key stays data.
  return Object.fromEntries(entries);
}

/**
 * Stripe's metadata update rules: absent keeps `current`, `metadata=` clears all, a key set to '' is
 * removed, others are merged. Limits as Stripe's: 50 keys, keys ≤ 40 characters, values ≤ 500.
 */
export function mergeMetadata(current: Record<string, string>, form: FormObject, param = 'metadata'): Record<string, string> {
  const update = stringMap(form, param);
  if (update === undefined) return { ...current };
  if (valueAt(form, param) === '') return {};
  const merged = new Map(Object.entries(current));
  for (const [key, value] of Object.entries(update)) {
    if (key.length > 40) throw invalidParam(`${param}[${key}]`, 'Metadata keys can have up to 40 characters.');
    if (value.length > 500) throw invalidParam(`${param}[${key}]`, 'Metadata values can have up to 500 characters.');
    if (value === '') merged.delete(key);
    else merged.set(key, value);
  }
  if (merged.size > 50) throw invalidParam(param, 'Metadata can have up to 50 keys.');
  return Object.fromEntries(merged);
}

/** Stripe answers 400 `parameter_unknown` to a parameter it does not know; so does the stand-in for one it does not model. */
export function rejectUnknown(form: FormObject, allowed: Allowed, prefix = ''): void {
  for (const [key, value] of Object.entries(form)) {
    const name = prefix ? `${prefix}[${key}]` : key;
    const rule = allowed[key];
    if (rule === undefined) {
      throw invalidParam(name, `Received unknown parameter: ${name} (the Stripe stand-in does not model it)`, 'parameter_unknown');
    }
    if (rule === 'hash') continue;
    if (rule === true) {
      if (typeof value !== 'string') throw invalidParam(name, `Invalid value for ${name}: expected a string`);
      continue;
    }
    if (typeof value === 'string') {
      if (value !== '') throw invalidParam(name, `Invalid object: ${name} must be a hash`);
      continue;
    }
    rejectUnknown(value, rule, name);
  }
}
