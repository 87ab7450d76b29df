import { Argument, type Command, Option } from 'commander';
import { TIERS } from '../lib/tiers.js';
import { type AdminApi, path } from './admin-api.js';
import * as parse from './arguments.js';
import { UsageError } from './exit-codes.js';

/**
 * The operator's deployment and cost-table commands (docs/cli.md, docs/operator.md) through /api/v1/admin.
 * Arguments are checked before anything is sent, like every operator command.
 */
export function addDeploymentCommands(program: Command, connect: () => AdminApi, print: (value: unknown) => void): void {
  const id = () => new Argument('<id>', 'deployment id (a UUID; creditgate deployments lists them)').argParser(parse.uuid);

  program
    .command('deployments')
    .description('list deployments')
    .addOption(new Option('--org <id>', 'only the deployments of this organization (a UUID)').argParser(parse.uuid))
    .action(async (options: { org?: string }) => {
      const query = options.org ? path`?organization_id=${options.org}` : '';
      print(await connect().send('GET', `/api/v1/admin/deployments${query}`));
    });
  program
    .command('deployment')
    .description('show one deployment with its balance')
    .addArgument(id())
    .action(async (deployment: string) => print(await connect().send('GET', path`/api/v1/admin/deployments/${deployment}`)));
  program
    .command('tier')
    .description("set a deployment's tier; the new allocation applies at once")
    .addArgument(id())
    .addArgument(new Argument('<tier>', TIERS.join('|')).argParser(parse.tier))
    .action(async (deployment: string, tier: string) => print(await connect().send('PUT', path`/api/v1/admin/deployments/${deployment}`, { tier })));
  for (const [name, status] of [
    ['suspend', 'suspended'],
    ['activate', 'active'],
  ] as const) {
    program
      .command(name)
      .description(`set a deployment's status to ${status}`)
      .addArgument(id())
      .action(async (deployment: string) => print(await connect().send('PUT', path`/api/v1/admin/deployments/${deployment}`, { status })));
  }
  program
    .command('grant')
    .description('grant purchased credits, or take them back with a negative amount (never below zero)')
    .addArgument(id())
    .addArgument(new Argument('<amount>', 'whole number of credits, negative to take back').argParser(parse.wholeNumber))
    .argument('<reason...>', 'why, for the ledger (the remaining words)')
    .addOption(new Option('--expires-at <date-time>', 'the granted credits lapse then (ISO 8601, e.g. 2027-01-01T00:00:00Z)').argParser(parse.dateTime))
    .action(async (deployment: string, amount: number, words: string[], options: { expiresAt?: string }) => {
      const reason = words.join(' ').trim();
      if (reason === '') throw new UsageError('grant: REASON must not be empty; see creditgate grant --help');
      const body = { amount, reason, ...(options.expiresAt ? { expires_at: options.expiresAt } : {}) };
      print(await connect().send('POST', path`/api/v1/admin/deployments/${deployment}/credits`, body));
    });
  program
    .command('override')
    .description('merge overrides of the tier\'s terms ("null" removes one)')
    .addArgument(id())
    .addOption(new Option('--monthly-credits <n>', 'credits per period instead of the tier allocation').argParser(parse.countOrNull))
    .addOption(new Option('--api-rate-limit <n>', 'requests per minute instead of the tier limit').argParser(parse.countOrNull))
    .addOption(new Option('--ai-tokens-limit <n>', 'AI tokens per period instead of the tier limit').argParser(parse.countOrNull))
    .addOption(new Option('--expires-at <date-time>', 'when the overrides lapse (ISO 8601, in the future)').argParser(parse.dateTimeOrNull))
    .action(async (deployment: string, options: Record<string, number | string | null | undefined>) => {
      const body = {
        monthly_credits: parse.orNull(options.monthlyCredits),
        api_rate_limit: parse.orNull(options.apiRateLimit),
        ai_tokens_limit: parse.orNull(options.aiTokensLimit),
        expires_at: parse.orNull(options.expiresAt),
      };
      const given = Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
      if (Object.keys(given).length === 0) throw new UsageError('override: name at least one override to set; see creditgate override --help');
      print(await connect().send('PUT', path`/api/v1/admin/deployments/${deployment}/overrides`, given));
    });
  program
    .command('clear-overrides')
    .description('remove every override')
    .addArgument(id())
    .action(async (deployment: string) => print(await connect().send('DELETE', path`/api/v1/admin/deployments/${deployment}/overrides`)));
  program
    .command('reset-usage')
    .description("reset the period's usage counters")
    .addArgument(id())
    .option('--credits', "reset the period's used monthly credits")
    .option('--ai-tokens', "reset the period's used AI tokens")
    .action(async (deployment: string, options: { credits?: boolean; aiTokens?: boolean }) => {
      if (!options.credits && !options.aiTokens) throw new UsageError('reset-usage: name what to reset, --credits and/or --ai-tokens');
      const body = { ai_tokens: options.aiTokens === true, monthly_credits: options.credits === true };
      print(await connect().send('POST', path`/api/v1/admin/deployments/${deployment}/usage/reset`, body));
    });
  program
    .command('cost')
    .description("set an action's credit cost (creates the action if new)")
    .addArgument(new Argument('<action>', 'action name (a-z 0-9 _ . -)').argParser(parse.pathSegment))
    .addArgument(new Argument('<credits>', 'whole number of credits, 0 or more').argParser(parse.count))
    .action(async (action: string, credits: number) => print(await connect().send('PUT', path`/api/v1/admin/credit-costs/${action}`, { credits })));
  program
    .command('map-tool')
    .description('meter TOOL as ACTION (a tool with no mapping costs platform_basic)')
    .addArgument(new Argument('<tool>', 'tool name as the MCP server reports it').argParser(parse.pathSegment))
    .addArgument(new Argument('<action>', 'an action of the cost table').argParser(parse.nonEmpty))
    .action(async (tool: string, action: string) => print(await connect().send('PUT', path`/api/v1/admin/tool-actions/${tool}`, { action })));
}
