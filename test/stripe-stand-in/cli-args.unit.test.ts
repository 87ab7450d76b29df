import { describe, expect, it } from 'vitest';
import { parseCliArgs } from './cli-args.js';

describe('the stand-in CLI arguments', () => {
  it('reads prices, packs and the forwarding target', () => {
    const config = parseCliArgs([
      '--port',
      '12111',
      '--forward-to',
      'http://127.0.0.1:8080/webhooks/stripe',
      '--prices',
      'launch:4900:month,growth:19900:year,team:900',
      '--packs',
      'small:500,large:4000:9000',
    ]);
    expect(config).toMatchObject({ port: 12111, forwardTo: 'http://127.0.0.1:8080/webhooks/stripe', currency: 'usd' });
    expect(config.prices).toEqual([
      { name: 'launch', cents: 4900, interval: 'month' },
      { name: 'growth', cents: 19900, interval: 'year' },
      { name: 'team', cents: 900, interval: 'month' },
    ]);
    expect(config.packs).toEqual([
      { name: 'small', cents: 500, credits: 1000 },
      { name: 'large', cents: 4000, credits: 9000 },
    ]);
  });

  it('refuses what it cannot use', () => {
    expect(() => parseCliArgs(['--prices', 'launch:49.00'])).toThrow(/whole cents/);
    expect(() => parseCliArgs(['--prices', 'launch:4900:week'])).toThrow(/month or year/);
    expect(() => parseCliArgs(['--webhook-secret', 'nope'])).toThrow(/whsec_/);
    expect(() => parseCliArgs(['--port', '70000'])).toThrow(/not a port/);
  });
});
