import { type CliConfig, parseCliArgs, USAGE } from './cli-args.js';
import { type StripeStandIn, startStripeStandIn } from './server.js';

/**
 * `npm run stripe:stand-in -- --forward-to http://127.0.0.1:8080/webhooks/stripe --prices launch:4900:month`
 * Starts the stand-in in auto delivery mode, creates the prices, and prints the service's environment
 * lines on stdout (comments start with #, so the output can be saved as an env file). Requests and
 * deliveries are logged on stderr.
 */
async function main(): Promise<void> {
  let config: CliConfig;
  try {
    config = parseCliArgs(process.argv.slice(2));
  } catch (error) {
    console.error(`${(error as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (config.help) {
    console.log(USAGE);
    return;
  }
  const standIn = await startStripeStandIn({
    port: config.port,
    delivery: 'auto',
    ...(config.secretKey ? { secretKey: config.secretKey } : {}),
    ...(config.webhookSecret ? { webhookSecret: config.webhookSecret } : {}),
    ...(config.forwardTo ? { webhookUrl: config.forwardTo } : {}),
    onRequest: (line) => console.error(line),
    onDelivery: (r) => console.error(`event ${r.type} ${r.eventId} → ${r.ok ? r.status : `failed (${r.error ?? r.status})`}`),
  });
  console.log(environment(standIn, config).join('\n'));
  const stop = () => {
    standIn.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

function title(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

function environment(standIn: StripeStandIn, config: CliConfig): string[] {
  const tiers = config.prices.map((p) => {
    const price = standIn.createPrice({ productName: title(p.name), unitAmount: p.cents, currency: config.currency, interval: p.interval, lookupKey: p.name });
    return `${price.id}=${p.name}`;
  });
  const packs = config.packs.map((p) => {
    const price = standIn.createPrice({ productName: `${title(p.name)} credit pack`, unitAmount: p.cents, currency: config.currency, lookupKey: `pack_${p.name}` });
    return `${p.name}=${p.credits}:${price.id}`;
  });
  return [
    `# Stripe stand-in on ${standIn.url} (checkout pages at ${standIn.url}/checkout/<id>, controls under ${standIn.url}/_stand-in/)`,
    `# events ${config.forwardTo ? `→ ${config.forwardTo}` : 'are recorded only (no --forward-to); see GET /_stand-in/events'}`,
    `STRIPE_API_BASE=${standIn.url}`,
    `STRIPE_SECRET_KEY=${standIn.secretKey}`,
    `STRIPE_WEBHOOK_SECRET=${standIn.webhookSecret}`,
    ...(tiers.length ? [`STRIPE_PRICE_TIERS=${tiers.join(',')}`] : []),
    ...(packs.length ? [`CREDIT_PACKS=${packs.join(',')}`] : []),
  ];
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
