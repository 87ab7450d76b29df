import { InvalidArgumentError } from 'commander';
import { TIERS, type Tier } from '../lib/tiers.js';

/**
 * Parsers for the operator commands' arguments, so a mistake is a one-line usage error (exit 2)
 * before anything is sent. The service checks everything again; these only catch what a person
 * mistypes; each message completes "<argument> '<value>' …" (cli.ts words commander's error line).
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function uuid(value: string): string {
  if (!UUID.test(value)) throw new InvalidArgumentError('must be a UUID (creditgate deployments lists them)');
  return value;
}

export function tier(value: string): Tier {
  if (!(TIERS as readonly string[]).includes(value)) throw new InvalidArgumentError(`must be one of ${TIERS.join(', ')}`);
  return value as Tier;
}

/** A whole number (negative allowed: a negative grant takes credits back). */
export function wholeNumber(value: string): number {
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(Number(value))) throw new InvalidArgumentError('must be a whole number');
  return Number(value);
}

export function count(value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) throw new InvalidArgumentError('must be a whole number, 0 or more');
  return Number(value);
}

/**
 * The word that removes an override or clears a field. Parsers keep it as the string: commander turns
 * an option value a parser makes null into "" (the body builder maps it with `orNull`).
 */
export const NULL_WORD = 'null';
export const orNull = <T>(value: T | typeof NULL_WORD): T | null => (value === NULL_WORD ? null : value);

/** An override: a count, or "null" to remove it. */
export function countOrNull(value: string): number | typeof NULL_WORD {
  if (value === NULL_WORD) return NULL_WORD;
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError('must be a whole number, 0 or more, or "null" to remove the override');
  }
  return Number(value);
}

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;

/** An RFC 3339 date-time with its time zone, as the API takes it (2027-01-01T00:00:00Z). */
export function dateTime(value: string): string {
  const match = DATE_TIME.exec(value);
  const [, y, mo, d, h, mi, s] = (match ?? []).map(Number) as number[];
  const day = match ? new Date(Date.UTC(y!, mo! - 1, d!)) : null;
  const valid = day !== null && day.getUTCMonth() === mo! - 1 && day.getUTCDate() === d && h! < 24 && mi! < 60 && s! < 61;
  if (!valid) throw new InvalidArgumentError('must be an ISO 8601 date-time with a time zone, e.g. 2027-01-01T00:00:00Z');
  return value;
}

export function dateTimeOrNull(value: string): string {
  return value === NULL_WORD ? NULL_WORD : dateTime(value);
}

export function nonEmpty(value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError('must not be empty');
  return value;
}

/** A name sent as a URL path segment: "." or ".." would be resolved away by URL parsing and reach another admin route. */
export function pathSegment(value: string): string {
  if (value === '.' || value === '..') throw new InvalidArgumentError('must not be "." or ".."');
  return nonEmpty(value);
}

/** A template id (the same check as uuid, pointing at the command that lists templates). */
export function templateId(value: string): string {
  if (!UUID.test(value)) throw new InvalidArgumentError('must be a UUID (creditgate templates lists them)');
  return value;
}

/** The organization slug rule (docs/accounts.md, Organizations), which template slugs follow. */
export function slug(value: string): string {
  if (!/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/.test(value)) {
    throw new InvalidArgumentError('must be 1 to 63 of a-z, 0-9 and hyphens, starting and ending with a letter or digit');
  }
  return value;
}

/** A JSON object, as a template's config. */
export function jsonObject(value: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    parsed = undefined;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new InvalidArgumentError('must be a JSON object, e.g. \'{"image":"blog:1"}\'');
  }
  return parsed as Record<string, unknown>;
}

/**
 * An http(s) URL, or "null" to clear it. The word stays a string here: commander turns an option
 * value a parser makes null into "" (the caller maps "null" to null when it builds the body).
 */
export function httpUrlOrNull(value: string): string {
  if (value !== 'null' && (!/^https?:\/\/[^/?#\s]/i.test(value) || !URL.canParse(value))) {
    throw new InvalidArgumentError('must be an http(s) URL, or "null" to clear it');
  }
  return value;
}
