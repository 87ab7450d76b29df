import { Argument, type Command, Option } from 'commander';
import { type AdminApi, path } from './admin-api.js';
import * as parse from './arguments.js';

/**
 * The operator's auto top-up commands (docs/cli.md; docs/billing.md, "Auto top-up") through
 * /api/v1/admin/organizations/{id}/auto-top-up: show the setting, set the whole of it. Arguments are
 * checked before anything is sent; the service checks everything again (a pack it does not sell is
 * 400 naming the packs; enabling without billing or a saved payment method is 409).
 */
interface SetOptions {
  enabled: boolean;
  below: number;
  pack: string;
  maxPerMonth: number;
}

export function addAutoTopUpCommands(program: Command, connect: () => AdminApi, print: (value: unknown) => void): void {
  const org = () => new Argument('<org>', "organization id (a UUID; creditgate deployments lists each deployment's organization_id)").argParser(parse.organizationId);
  const url = (organization: string) => path`/api/v1/admin/organizations/${organization}/auto-top-up`;

  program
    .command('auto-top-up')
    .description("show an organization's auto top-up setting (never set: enabled false and nulls)")
    .addArgument(org())
    .action(async (organization: string) => print(await connect().send('GET', url(organization))));
  program
    .command('auto-top-up-set')
    .description('set auto top-up: buy a credit pack off-session when a deployment runs below a line (every option required)')
    .addArgument(org())
    .addOption(new Option('--enabled <true|false>', 'on or off; enabling needs billing and a saved payment method').argParser(parse.boolean).makeOptionMandatory())
    .addOption(new Option('--below <n>', "a deduction that takes a deployment's available credits below this starts a top-up").argParser(parse.autoTopUpBelow).makeOptionMandatory())
    .addOption(new Option('--pack <name>', 'the credit pack bought (a CREDIT_PACKS name)').argParser(parse.packName).makeOptionMandatory())
    .addOption(new Option('--max-per-month <n>', 'top-ups started per calendar month (UTC) in the organization, at most').argParser(parse.topUpsPerMonth).makeOptionMandatory())
    .action(async (organization: string, options: SetOptions) => {
      const body = { enabled: options.enabled, below_credits: options.below, pack: options.pack, max_per_month: options.maxPerMonth };
      print(await connect().send('PUT', url(organization), body));
    });
}
