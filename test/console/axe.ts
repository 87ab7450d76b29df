/**
 * axe-core in a console page, as a11y.browser.test.ts runs it (docs/console.md "Tests"): the WCAG 2.x
 * A/AA rules and best practices, only serious and critical violations kept. The page's context must
 * bypass its CSP (`newPage({ bypassCSP: true })`) so that axe's script can be injected.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

interface Violation {
  id: string;
  impact: string | null;
  help: string;
  nodes: Array<{ target: string[]; failureSummary?: string }>;
}

export interface Finding {
  id: string;
  impact: string | null;
  help: string;
  targets: string[];
}

/**
 * Wait until the page settled: a heading, and no placeholder of something loading (`aria-busy`, the
 * console's `Loading`, console/src/ui.tsx), within the context's step bound.
 */
export async function settled(page: Page): Promise<void> {
  await page.locator('h1').first().waitFor();
  await page.locator('[aria-busy="true"]').first().waitFor({ state: 'detached' });
}

/**
 * Go to another console page the way the console's own links do (`history.pushState`, which its router,
 * wouter, follows), so that the document and axe's script injected into it stay: a page load and a new
 * injection of axe (some 0.2 s each on this machine) per audited page made most of an audit's time.
 * The page's content is the one a load of `path` shows; a page that is not the console yet is loaded.
 * React renders the new route in a microtask after the history event; the macrotask awaited after it
 * lets that happen before `settled` looks at the page.
 */
export async function visit(page: Page, path: string): Promise<void> {
  const inConsole = await page.evaluate(() => location.pathname.startsWith('/console/')).catch(() => false);
  if (!inConsole) {
    await page.goto(path);
    return;
  }
  await page.evaluate(async (to) => {
    history.pushState(null, '', to);
    await new Promise((resolve) => setTimeout(resolve, 0));
  }, path);
}

/**
 * The rules whose outcome depends on the page's colours: all that a theme changes (the console's
 * themes differ only in their colour properties, console/src/styles.css), so a second theme of a page
 * whose structure another audit checked needs only these.
 */
export const COLOUR_RULES: readonly string[] = ['color-contrast', 'link-in-text-block'];

/** Run axe over the settled page (every A/AA rule and best practice, or only `rules`); its serious and critical violations. */
export async function audit(page: Page, rules?: readonly string[]): Promise<Finding[]> {
  await settled(page);
  // Once per document: after `visit`, the document (and axe in it) is the one audited before.
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE_SOURCE);
  const runOnly = rules ? { type: 'rule', values: [...rules] } : { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] };
  const violations = await page.evaluate(async (only) => {
    const axe = (window as unknown as { axe: { run(context: Document, options: object): Promise<{ violations: Violation[] }> } }).axe;
    const result = await axe.run(document, { runOnly: only, resultTypes: ['violations'] });
    return result.violations;
  }, runOnly);
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map((n) => n.target.join(' ')) }));
}
