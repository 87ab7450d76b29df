/**
 * Identifiers. Ids are UUIDs; one that is not well formed names nothing that exists, so a service
 * answers it as a missing row without asking the database (docs/input.md, UUID ids).
 */
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True when `value` is a UUID in its canonical 8-4-4-4-12 hex form (any case). */
export const isUuid = (value: string): boolean => UUID_RE.test(value);
