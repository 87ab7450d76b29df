/**
 * CSV for the usage records export (docs/usage-analytics.md, CSV export): RFC 4180 quoting, CRLF line
 * ends, UTF-8 without a byte-order mark, and spreadsheet formula injection neutralised (OWASP "CSV
 * Injection"): wherever a spreadsheet may start a cell inside caller text — the text's start, or
 * after a `;` or a tab, where Excel splits in locales whose list separator is `;` — a formula
 * trigger (= + - @), even after spaces, gets an apostrophe put in front so the cell shows as text;
 * the cell is then quoted, so a reader that honours quotes keeps it in one piece.
 */

/** The text's own start: a trigger after optional spaces, or a tab or carriage return. */
const FORMULA_START = /^(?:[\t\r]|\s*[=+\-@])/;
/** A `;` or tab that a `;`-locale spreadsheet would split on, followed by a trigger after optional spaces. */
const FORMULA_AFTER_SEPARATOR = /([;\t])(?=\s*[=+\-@])/g;
const NEEDS_QUOTES = /[",;\t\r\n]/;

/** One cell of caller-supplied text (tool names, end-user ids, errors): neutralised, then quoted when needed. */
export function textCell(value: string | null): string {
  if (value === null) return '';
  const split = value.replace(FORMULA_AFTER_SEPARATOR, "$1'");
  const safe = FORMULA_START.test(split) ? `'${split}` : split;
  return NEEDS_QUOTES.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/** A cell the service wrote itself (ids, numbers, booleans, ISO times): nothing to neutralise or quote. */
export function plainCell(value: string | number | boolean | null): string {
  return value === null ? '' : String(value);
}

/** Rows of already-rendered cells as one CSV document. */
export function csvDocument(header: readonly string[], rows: string[][]): string {
  return [header.join(','), ...rows.map((r) => r.join(','))].map((line) => `${line}\r\n`).join('');
}

/**
 * Whether the client asked for CSV: `text/csv` is in Accept with q > 0 and not below
 * `application/json` (wildcards such as a browser's `*\/*` do not count: they still get JSON).
 */
export function acceptsCsv(accept: string | undefined): boolean {
  if (!accept) return false;
  let csv = 0;
  let json = 0;
  for (const range of accept.split(',')) {
    const [type = '', ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    const qParam = params.find((p) => p.startsWith('q='));
    const q = qParam ? Number(qParam.slice(2)) : 1;
    const weight = Number.isFinite(q) ? Math.max(0, Math.min(1, q)) : 0;
    if (type === 'text/csv') csv = Math.max(csv, weight);
    else if (type === 'application/json') json = Math.max(json, weight);
  }
  return csv > 0 && csv >= json;
}
