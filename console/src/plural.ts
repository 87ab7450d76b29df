/**
 * Counts in words: "1 key", "2 keys", "1,000 credits". Every count the console shows goes through
 * here, so no page says "1 keys". English plural rules (Intl.PluralRules): "one" for exactly 1.
 */
const rules = new Intl.PluralRules('en-US');
const intFormat = new Intl.NumberFormat('en-US');

/** The word for a count: `one` when the count is one, else `other` (the word with an "s" unless given). */
export function plural(n: number, one: string, other = `${one}s`): string {
  return rules.select(n) === 'one' ? one : other;
}

/** The count and its word: countOf(1, 'key') → "1 key"; countOf(1200, 'entry', 'entries') → "1,200 entries". */
export function countOf(n: number, one: string, other = `${one}s`): string {
  return `${intFormat.format(n)} ${plural(n, one, other)}`;
}
