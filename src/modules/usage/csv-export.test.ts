import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness } from '../../../test/harness.js';
import { parseCsv } from '../../../test/csv-reader.js';
import { usageFixtures } from '../../../test/usage-fixtures.js';

/** GET /organizations/{id}/usage/records with Accept: text/csv (docs/usage-analytics.md). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const f = usageFixtures(() => h);
const HEADER = ['id', 'timestamp', 'deployment_id', 'tool_name', 'action', 'mcp_user_id', 'success', 'credits', 'credits_refunded', 'error', 'invocation_id'];

/** Tool names a spreadsheet or a naive CSV reader would trip on, and how each comes out. */
const NAMES: Array<[string, string]> = [
  ['plain_tool', 'plain_tool'],
  ['a,b', 'a,b'],
  ['say "hi"', 'say "hi"'],
  ['two\nlines', 'two\nlines'],
  ['=1+2', "'=1+2"],
  ['@SUM(A1:A9)', "'@SUM(A1:A9)"],
  ['+cmd', "'+cmd"],
  ['-2+3', "'-2+3"],
  ['inner=ok', 'inner=ok'],
];

describe('usage records as CSV', () => {
  it('a header row, one row per record, quoting per RFC 4180 and formulas neutralised; an attachment', async () => {
    h.clock.set('2026-05-01T00:00:00.000Z');
    const t = await createTenant(h);
    for (const [name] of NAMES) {
      h.clock.advance(1000);
      await f.record(t.deploymentId, name, { mcpUserId: name === 'plain_tool' ? '=HYPERLINK("http://x")' : null });
    }
    h.clock.set('2026-05-02T03:04:05.000Z');
    const res = await f.recordsRes({ 'x-api-key': t.apiKey, accept: 'text/csv' }, t.organizationId);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(res.headers['content-disposition']).toBe(`attachment; filename="usage-${t.organizationId}-20260502T030405Z.csv"`);
    expect(res.headers.vary).toContain('Accept');
    expect(res.headers.link).toBeUndefined();
    expect(res.body.endsWith('\r\n')).toBe(true);
    expect(res.body).toContain('"say ""hi"""');
    expect(res.body).toContain('"two\nlines"');

    const [header, ...rows] = parseCsv(res.body);
    expect(header).toEqual(HEADER);
    expect(rows).toHaveLength(NAMES.length);
    // Newest first, like the JSON pages.
    expect(rows.map((r) => r[3])).toEqual(NAMES.map(([, out]) => out).reverse());
    const plain = rows.find((r) => r[3] === 'plain_tool')!;
    expect(plain[5]).toBe('\'=HYPERLINK("http://x")');
    expect(plain).toMatchObject({ 2: t.deploymentId, 4: 'platform_basic', 6: 'true', 7: '1', 8: '0', 9: '', 10: '' });
    expect(new Date(plain[1]!).toISOString()).toBe(plain[1]);

    // The same filters as the JSON list.
    const one = await f.recordsRes({ 'x-api-key': t.apiKey, accept: 'text/csv' }, t.organizationId, `?tool_name=${encodeURIComponent('a,b')}`);
    expect(parseCsv(one.body).slice(1).map((r) => r[3])).toEqual(['a,b']);
  });

  it('more records than a part holds continue at Link: rel="next"; JSON unless text/csv is asked for first', async () => {
    h.clock.set('2026-05-10T00:00:00.000Z');
    const t = await createTenant(h);
    for (let i = 0; i < 5; i++) {
      h.clock.advance(1000);
      await f.record(t.deploymentId, `tool-${i}`);
    }
    const headers = { 'x-api-key': t.apiKey, accept: 'text/csv' };
    const seen: string[] = [];
    let url: string | undefined = `/organizations/${t.organizationId}/usage/records?limit=2&success=true`;
    let parts = 0;
    while (url) {
      const res = await h.request({ method: 'GET', url, headers });
      expect(res.statusCode, res.body).toBe(200);
      const [header, ...rows] = parseCsv(res.body);
      expect(header).toEqual(HEADER);
      seen.push(...rows.map((r) => r[0]!));
      const link = res.headers.link as string | undefined;
      url = link ? /^<([^>]+)>; rel="next"$/.exec(link)![1] : undefined;
      if (url) expect(url).toContain('success=true');
      parts += 1;
    }
    expect(parts).toBe(3);
    expect(new Set(seen).size).toBe(5);

    for (const accept of ['*/*', 'application/json', 'application/json, text/csv;q=0.5', 'text/csv;q=0']) {
      const res = await f.recordsRes({ 'x-api-key': t.apiKey, accept }, t.organizationId);
      expect(res.headers['content-type'], accept).toContain('application/json');
      expect(res.json().data, accept).toHaveLength(5);
    }
    const csv = await f.recordsRes({ 'x-api-key': t.apiKey, accept: 'application/json;q=0.9, text/csv' }, t.organizationId);
    expect(csv.headers['content-type']).toBe('text/csv; charset=utf-8');
    // Errors stay in the envelope.
    const bad = await f.recordsRes({ 'x-api-key': t.apiKey, accept: 'text/csv' }, t.organizationId, '?cursor=nope');
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR' } });
  });

  it('a formula behind a ";" or a tab inside a cell is neutralised too: a ";" locale spreadsheet splits there (docs/usage-analytics.md, CSV export)', async () => {
    h.clock.set('2026-05-20T00:00:00.000Z');
    const t = await createTenant(h);
    const payloads = ["x;=cmd|' /C calc'!A0", 'x;=HYPERLINK(CHAR(104)&CHAR(116)&A2);', "ok; @SUM(1+1)*cmd|' /C calc'!A0", 'tab\t+1'];
    for (const p of payloads) {
      h.clock.advance(1000);
      await f.record(t.deploymentId, p, { mcpUserId: p });
    }
    const res = await f.recordsRes({ 'x-api-key': t.apiKey, accept: 'text/csv' }, t.organizationId);
    expect(res.statusCode, res.body).toBe(200);
    // Split as Excel does where the list separator is ";": no piece starts a formula.
    const live = res.body
      .split('\r\n')
      .flatMap((line) => line.split(/[;\t]/).slice(1))
      .filter((piece) => /^\s*[=+\-@]/.test(piece));
    expect(live).toEqual([]);
    // A reader that honours quotes gets each cell whole, the apostrophe in front of the formula.
    const rows = parseCsv(res.body).slice(1);
    expect(rows.map((r) => r[3])).toEqual(["tab\t'+1", "ok;' @SUM(1+1)*cmd|' /C calc'!A0", "x;'=HYPERLINK(CHAR(104)&CHAR(116)&A2);", "x;'=cmd|' /C calc'!A0"]);
    // The JSON list keeps the exact values.
    const exact = (await f.recordsRes({ 'x-api-key': t.apiKey }, t.organizationId)).json() as { data: Array<{ tool_name: string }> };
    expect(exact.data.map((r) => r.tool_name)).toEqual([...payloads].reverse());
  });
});
