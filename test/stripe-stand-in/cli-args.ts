import { parseArgs } from 'node:util';

export const USAGE = `Usage: npm run stripe:stand-in -- [options]

  --port <n>                 listen on 127.0.0.1:<n> (default 12111; 0 picks a free port)
  --forward-to <url>         POST signed events here as they happen (retried with backoff on failure)
  --secret-key <sk_…>        the API key to accept (default sk_test_standin)
  --webhook-secret <whsec_…> the signing secret (default: generated)
  --prices <list>            subscription prices, name:cents[:month|year], e.g. launch:4900:month,growth:19900:month
  --packs <list>             one-time credit packs, name:cents[:credits], e.g. small:500,large:4000
                             (credits default to cents × 2)
  --currency <code>          currency of the prices above (default usd)
  --help                     this text`;

export interface TierPrice {
  name: string;
  cents: number;
  interval: 'month' | 'year';
}

export interface PackPrice {
  name: string;
  cents: number;
  credits: number;
}

export interface CliConfig {
  port: number;
  forwardTo: string | undefined;
  secretKey: string | undefined;
  webhookSecret: string | undefined;
  currency: string;
  prices: TierPrice[];
  packs: PackPrice[];
  help: boolean;
}

const NAME = /^[a-z0-9][a-z0-9_-]{0,39}$/;

function entries(raw: string | undefined): string[] {
  return (raw ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
}

function cents(value: string | undefined, entry: string): number {
  if (!value || !/^\d{1,8}$/.test(value)) throw new Error(`"${entry}": the amount must be whole cents`);
  return Number(value);
}

export function parseTierPrices(raw: string | undefined): TierPrice[] {
  return entries(raw).map((entry) => {
    const [name, amount, interval = 'month', ...rest] = entry.split(':');
    if (!name || !NAME.test(name) || rest.length > 0) throw new Error(`"${entry}": expected name:cents[:month|year]`);
    if (interval !== 'month' && interval !== 'year') throw new Error(`"${entry}": the interval must be month or year`);
    return { name, cents: cents(amount, entry), interval };
  });
}

export function parsePacks(raw: string | undefined): PackPrice[] {
  return entries(raw).map((entry) => {
    const [name, amount, credits, ...rest] = entry.split(':');
    if (!name || !NAME.test(name) || rest.length > 0) throw new Error(`"${entry}": expected name:cents[:credits]`);
    const price = cents(amount, entry);
    if (credits !== undefined && !/^\d{1,10}$/.test(credits)) throw new Error(`"${entry}": credits must be a whole number`);
    return { name, cents: price, credits: credits === undefined ? price * 2 : Number(credits) };
  });
}

export function parseCliArgs(argv: string[]): CliConfig {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: 'string', default: '12111' },
      'forward-to': { type: 'string' },
      'secret-key': { type: 'string' },
      'webhook-secret': { type: 'string' },
      prices: { type: 'string' },
      packs: { type: 'string' },
      currency: { type: 'string', default: 'usd' },
      help: { type: 'boolean', default: false },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port ${values.port}: not a port`);
  if (values['forward-to'] !== undefined && !URL.canParse(values['forward-to'])) throw new Error('--forward-to: not a URL');
  if (values['webhook-secret'] !== undefined && !values['webhook-secret'].startsWith('whsec_')) throw new Error('--webhook-secret must start with whsec_');
  return {
    port,
    forwardTo: values['forward-to'],
    secretKey: values['secret-key'],
    webhookSecret: values['webhook-secret'],
    currency: values.currency,
    prices: parseTierPrices(values.prices),
    packs: parsePacks(values.packs),
    help: values.help,
  };
}
