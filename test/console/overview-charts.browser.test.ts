import type { Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, grant, json, setTierOverHttp, signUpWithOrganization } from '../harness.js';
import { type ConsoleService, browserTimeouts, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The overview's chart, range, zone, breakdowns and first steps (docs/console.md "The overview"):
 * every number the page shows is compared with the usage summary the API gives for the same query.
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

const ZONE = 'Europe/Berlin';

interface Group {
  key: string | null;
  calls: number;
  credits: number;
  input_tokens: number;
  output_tokens: number;
  split?: Array<{ key: string | null; other: boolean; credits: number }>;
}
interface Summary {
  totals: { calls: number; credits: number };
  groups: Group[];
  tz: string;
}

/**
 * A page in `ZONE` whose clock is the service's (the seed moved the service's clock days ahead of the
 * real one), recording the summary requests it makes.
 */
async function openPage(width = 1280): Promise<{ page: Page; summaries: URL[]; close: () => Promise<void> }> {
  const context = await s.browser.newContext({ baseURL: s.baseUrl, viewport: { width, height: 860 }, timezoneId: ZONE });
  context.setDefaultTimeout(45_000);
  const page = await context.newPage();
  page.on('pageerror', (err) => {
    throw err;
  });
  await page.clock.setFixedTime(s.h.clock.now());
  const summaries: URL[] = [];
  page.on('request', (r: Request) => {
    const url = new URL(r.url());
    if (url.pathname.endsWith('/usage/summary')) summaries.push(url);
  });
  return { page, summaries, close: () => context.close() };
}

/** The API's answer to the same summary request, asked with the organization's API key. */
async function sameAnswer(url: URL, token: string): Promise<Summary> {
  const res = await s.h.request({ method: 'GET', url: `${url.pathname}${url.search}`, headers: bearer(token) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: Summary }>(res).data ?? json<Summary>(res);
}

const digits = (text: string | null) => Number((text ?? '').replace(/[^0-9]/g, ''));
const lastDaily = (summaries: URL[]) => [...summaries].reverse().find((u) => u.searchParams.get('group_by') === 'day');

describe('the overview’s charts', () => {
  let owner: Awaited<ReturnType<typeof signUpWithOrganization>>;
  // The owner's access token expires as the seed moves the clock ten days on: the API is asked with a key.
  let apiKey = '';
  let oldCalls = 0;
  let recentCalls = 0;

  beforeAll(async () => {
    owner = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    const key = await createKeyOverHttp(s.h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
    apiKey = key.key;
    const record = async (tool: string) => {
      const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: tool } });
      expect(json(res), res.body).toMatchObject({ success: true });
    };
    // Ten days ago by the service's clock: three calls; today: four, over three tools.
    for (const tool of ['rag_query', 'rag_query', 'summarize']) await record(tool);
    oldCalls = 3;
    s.h.clock.advance(10 * 24 * 3600 * 1000);
    for (const tool of ['rag_query', 'summarize', 'translate', 'translate']) await record(tool);
    recentCalls = 4;
    s.h.clock.advance(1000);
  });

  it('shows a tooltip at the cursor whose total is the day’s, follows the range picker and keeps the range on reload', async () => {
    const { page, summaries, close } = await openPage();
    await signInInBrowser(page, owner);
    await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe(String(oldCalls + recentCalls));

    // Day buckets of the user's zone: tz is sent and named by the chart.
    const daily = lastDaily(summaries)!;
    expect(daily.searchParams.get('tz')).toBe(ZONE);
    expect(await page.getByTestId('zone').textContent()).toContain(ZONE);
    const answer = await sameAnswer(daily, apiKey);
    expect(await page.getByTestId('credits-total').textContent()).toBe(answer.totals.credits.toLocaleString('en-US'));
    // No stray legend entry for the x series.
    expect(await page.locator('[data-testid="usage-chart"] .u-legend .u-series').first().isVisible()).toBe(false);

    // Hovering the right edge: the last day, today.
    await page.locator('[data-testid="usage-chart"][data-rendered="true"]').waitFor();
    const over = page.locator('[data-testid="usage-chart"] .u-over');
    const box = (await over.boundingBox())!;
    await page.mouse.move(box.x + box.width - 3, box.y + box.height / 2);
    const tip = page.getByTestId('chart-tooltip');
    await tip.waitFor();
    const key = await tip.getAttribute('data-key');
    const day = answer.groups.find((g) => g.key === key)!;
    expect(day.credits).toBeGreaterThan(0);
    expect(digits(await tip.getByTestId('tip-total').textContent())).toBe(day.credits);
    const values = await tip.locator('.chart-tip-value').allTextContents();
    expect(values.map(digits).reduce((a, b) => a + b, 0)).toBe(day.credits);
    const shown = Object.fromEntries(
      await Promise.all((await tip.getByTestId('tip-series').all()).map(async (row) => [await row.locator('.chart-tip-name').textContent(), digits(await row.locator('.chart-tip-value').textContent())])),
    );
    for (const part of day.split ?? []) if (!part.other) expect(shown[part.key ?? '(none)']).toBe(part.credits);

    // The keyboard: Home is the first day of the range.
    await page.mouse.move(0, 0);
    await page.getByTestId('usage-chart').focus();
    await page.keyboard.press('Home');
    await expect.poll(() => tip.getAttribute('data-key')).toBe(answer.groups[0]!.key);
    await page.keyboard.press('Escape');
    await expect.poll(() => tip.isVisible()).toBe(false);

    // 7 days: a new request from a later day, and totals equal to its answer (the older calls drop out).
    await page.getByRole('button', { name: '7 days' }).click();
    await expect.poll(() => lastDaily(summaries)?.searchParams.get('from')).not.toBe(daily.searchParams.get('from'));
    const week = lastDaily(summaries)!;
    const weekAnswer = await sameAnswer(week, apiKey);
    expect(weekAnswer.totals.calls).toBe(recentCalls);
    await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe(String(weekAnswer.totals.calls));
    expect(await page.getByTestId('credits-total').textContent()).toBe(weekAnswer.totals.credits.toLocaleString('en-US'));
    expect(new URL(page.url()).searchParams.get('range')).toBe('7d');
    // Every summary of the page asked the same range.
    const asked = summaries.filter((u) => u.searchParams.get('from') === week.searchParams.get('from'));
    expect(new Set(asked.map((u) => u.searchParams.get('group_by')))).toEqual(new Set(['day', 'mcp_user', 'model', 'deployment']));

    // The model and deployment cards show the API's answer for the same range.
    const model = await sameAnswer(asked.find((u) => u.searchParams.get('group_by') === 'model')!, apiKey);
    const aiModels = model.groups.filter((g) => g.key !== null);
    if (aiModels.length === 0) await expect.poll(() => page.getByTestId('by-model').textContent()).toContain('No AI calls');
    else for (const g of aiModels) await page.getByTestId('by-model').getByRole('row', { name: new RegExp(g.key!) }).waitFor();
    const perDeployment = await sameAnswer(asked.find((u) => u.searchParams.get('group_by') === 'deployment')!, apiKey);
    expect(perDeployment.groups.map((g) => g.key)).toEqual([owner.deploymentId]);
    const deployments = json<{ data: Array<{ id: string; name: string }> }>(
      await s.h.request({ method: 'GET', url: `/organizations/${owner.organizationId}/deployments`, headers: bearer(apiKey) }),
    ).data;
    const name = deployments.find((d) => d.id === owner.deploymentId)!.name;
    await expect
      .poll(() => page.getByTestId('by-deployment').locator('tbody tr').first().locator('td').allTextContents())
      .toEqual([name, String(perDeployment.groups[0]!.calls), perDeployment.groups[0]!.credits.toLocaleString('en-US')]);

    // A reload keeps the range.
    const before = summaries.length;
    await page.reload();
    await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe(String(recentCalls));
    expect(await page.getByRole('button', { name: '7 days' }).getAttribute('aria-pressed')).toBe('true');
    expect(await page.locator('#per-day').textContent()).toContain('last 7 days');
    expect(lastDaily(summaries.slice(before))?.searchParams.get('from')).toBe(week.searchParams.get('from'));

    // Chosen days: the day of the older calls alone.
    const oldDay = new Intl.DateTimeFormat('en-CA', { timeZone: ZONE, year: 'numeric', month: '2-digit', day: '2-digit' }).format(
      new Date(s.h.clock.now().getTime() - 10 * 24 * 3600 * 1000 - 1000),
    );
    await page.getByRole('button', { name: 'Custom' }).click();
    await page.getByLabel('From').fill(oldDay);
    await page.getByLabel('To (included)').fill(oldDay);
    await page.getByRole('button', { name: 'Show' }).click();
    await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe(String(oldCalls));
    const custom = lastDaily(summaries)!;
    expect((await sameAnswer(custom, apiKey)).totals.calls).toBe(oldCalls);
    expect(Object.fromEntries(new URL(page.url()).searchParams)).toEqual({ from: oldDay, to: oldDay });
    await close();
  });

  it('does not scroll sideways at 390 px, with the tooltip and the custom range open', async () => {
    const { page, close } = await openPage();
    await signInInBrowser(page, owner);
    await page.setViewportSize({ width: 390, height: 860 });
    await page.locator('[data-testid="usage-chart"][data-rendered="true"]').waitFor();
    await page.getByTestId('by-deployment').locator('tbody tr').first().waitFor();
    const wide = () => page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
    let m = await wide();
    expect(m.scroll).toBeLessThanOrEqual(m.inner);
    // At 390 px the chart may start below the fold: hover scrolls it into view first.
    const over = page.locator('[data-testid="usage-chart"] .u-over');
    const box = (await over.boundingBox())!;
    await over.hover({ position: { x: box.width - 2, y: 10 } });
    await page.getByTestId('chart-tooltip').waitFor();
    await page.getByRole('button', { name: 'Custom' }).click();
    m = await wide();
    expect(m.scroll).toBeLessThanOrEqual(m.inner);
    await close();
  });
});

describe('the overview’s first steps', () => {
  it('leads a sandbox organization without credits to Billing', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page, close } = await openPage();
    await signInInBrowser(page, owner);
    const steps = page.getByTestId('no-usage');
    await steps.getByText('This organization has no credits yet.').waitFor();
    expect(await steps.getByRole('link', { name: 'Choose a plan' }).count()).toBe(1);
    expect(await steps.textContent()).not.toContain('API key');
    // The balance card links to the packs too.
    expect(await page.getByTestId('card-purchased').getByRole('link', { name: 'Buy credits' }).count()).toBe(1);
    await steps.getByRole('link', { name: 'Buy credits' }).click();
    await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/console/orgs/${owner.organizationId}/billing`);
    await close();
  });

  it('shows a new organization with credits its first API key and first call, with its deployment id', async () => {
    const owner = await signUpWithOrganization(s.h);
    await grant(s.h, owner.deploymentId, 500);
    const { page, close } = await openPage();
    await signInInBrowser(page, owner);
    await expect.poll(() => page.getByTestId('card-available').locator('.value').textContent()).toBe('500');
    const steps = page.getByTestId('no-usage');
    await expect.poll(() => page.getByTestId('first-call').textContent()).toContain(owner.deploymentId);
    expect(await page.getByTestId('first-call').textContent()).toContain('/api/v1/mcp/stdio/record-usage');
    expect(await steps.textContent()).not.toContain('no credits');
    await steps.getByRole('link', { name: 'Create your first API key' }).click();
    await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor();
    await close();
  });
});
