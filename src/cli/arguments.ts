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

/** An organization id (the same check as uuid, pointing at where the operator finds one). */
export function organizationId(value: string): string {
  if (!UUID.test(value)) throw new InvalidArgumentError("must be a UUID (creditgate deployments lists each deployment's organization_id)");
  return value;
}

/** A budget id (the same check as uuid, pointing at the command that lists budgets). */
export function budgetId(value: string): string {
  if (!UUID.test(value)) throw new InvalidArgumentError('must be a UUID (creditgate budgets ORG lists them)');
  return value;
}

/** An API key's id (as the organization's key list answers it). */
export function apiKeyId(value: string): string {
  if (!UUID.test(value)) throw new InvalidArgumentError("must be a UUID (an API key's id, not the key)");
  return value;
}

/** A parser that takes one of `values`. */
export function oneOf<const T extends string>(values: readonly T[]): (value: string) => T {
  return (value) => {
    if (!(values as readonly string[]).includes(value)) throw new InvalidArgumentError(`must be one of ${values.join(', ')}`);
    return value as T;
  };
}

/** The largest budget limit the API takes (docs/budgets.md, API). */
const MAX_BUDGET_LIMIT = 1_000_000_000_000;

/** A budget's limit: a whole number from 1 to 10^12. */
export function budgetLimit(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_BUDGET_LIMIT) {
    throw new InvalidArgumentError('must be a whole number from 1 to 1000000000000');
  }
  return Number(value);
}

/** A budget's limit, or "null" to remove it. */
export function budgetLimitOrNull(value: string): number | typeof NULL_WORD {
  if (value === NULL_WORD) return NULL_WORD;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_BUDGET_LIMIT) {
    throw new InvalidArgumentError('must be a whole number from 1 to 1000000000000, or "null" to remove the limit');
  }
  return Number(value);
}

/** Alert thresholds: up to 10 different percents from 1 to 100, comma-separated (80,100). */
export function percents(value: string): number[] {
  const parts = value.split(',').map((part) => part.trim());
  const valid = parts.length <= 10 && parts.every((part) => /^\d+$/.test(part) && Number(part) >= 1 && Number(part) <= 100);
  if (!valid || new Set(parts.map(Number)).size !== parts.length) {
    throw new InvalidArgumentError('must be up to 10 different whole numbers from 1 to 100, comma-separated, e.g. 80,100');
  }
  return parts.map(Number);
}

/** An end user or a tool a budget names: 1 to 200 characters, "*" for each one separately. */
export function budgetSubject(value: string): string {
  if (value.length < 1 || value.length > 200) throw new InvalidArgumentError('must be 1 to 200 characters ("*" for each one separately)');
  return value;
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

/** A yes or no option: the words true and false, as the API's JSON booleans. */
export function boolean(value: string): boolean {
  if (value !== 'true' && value !== 'false') throw new InvalidArgumentError('must be true or false');
  return value === 'true';
}

/** The auto top-up line (docs/billing.md, "Auto top-up"): a whole number of credits from 1 to 10^12. */
export function autoTopUpBelow(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_BUDGET_LIMIT) {
    throw new InvalidArgumentError('must be a whole number from 1 to 1000000000000');
  }
  return Number(value);
}

/** Auto top-ups started per calendar month, at most: a whole number from 1 to 1000. */
export function topUpsPerMonth(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 1000) throw new InvalidArgumentError('must be a whole number from 1 to 1000');
  return Number(value);
}

/** A credit pack's name (a CREDIT_PACKS name; the service names the packs it sells when it is not one). */
export function packName(value: string): string {
  if (value.trim() === '' || value.length > 100) throw new InvalidArgumentError('must be 1 to 100 characters (a CREDIT_PACKS name)');
  return value;
}
