import { Argument, type Command, Option } from 'commander';
import { type AdminApi, path } from './admin-api.js';
import * as parse from './arguments.js';
import { UsageError } from './exit-codes.js';

/**
 * The operator's budget commands (docs/cli.md, docs/budgets.md, API) through
 * /api/v1/admin/organizations/{id}/budgets: list, show, create, change, delete. Arguments are checked
 * before anything is sent, like every operator command; the service checks everything again.
 */
const SCOPES = ['organization', 'deployment', 'api_key', 'end_user', 'tool'] as const;
const WINDOWS = ['hour', 'day', 'week', 'month', 'period'] as const;
const MODES = ['block', 'alert'] as const;
type Scope = (typeof SCOPES)[number];

/** The option that names a scope's id, and the scope that takes it (docs/budgets.md, API: deployment_id narrows any scope). */
const SCOPE_IDS = [
  { scope: 'deployment', option: 'deployment', flag: '--deployment ID', field: 'deployment_id' },
  { scope: 'api_key', option: 'apiKey', flag: '--api-key ID', field: 'api_key_id' },
  { scope: 'end_user', option: 'endUser', flag: '--end-user ID', field: 'end_user_id' },
  { scope: 'tool', option: 'tool', flag: '--tool NAME', field: 'tool_name' },
] as const;

interface CreateOptions {
  deployment?: string;
  apiKey?: string;
  endUser?: string;
  tool?: string;
  limitCredits?: number;
  limitAiTokens?: number;
  mode?: string;
  alertThresholds?: number[];
}

interface UpdateOptions {
  limitCredits?: number | typeof parse.NULL_WORD;
  limitAiTokens?: number | typeof parse.NULL_WORD;
  window?: string;
  mode?: string;
  alertThresholds?: number[];
}

const defined = (body: Record<string, unknown>) => Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));

export function addBudgetCommands(program: Command, connect: () => AdminApi, print: (value: unknown) => void): void {
  const org = () => new Argument('<org>', "organization id (a UUID; creditgate deployments lists each deployment's organization_id)").argParser(parse.organizationId);
  const id = () => new Argument('<budget>', 'budget id (a UUID; creditgate budgets ORG lists them)').argParser(parse.budgetId);
  const url = (organization: string, budget?: string) =>
    budget === undefined ? path`/api/v1/admin/organizations/${organization}/budgets` : path`/api/v1/admin/organizations/${organization}/budgets/${budget}`;
  const mode = () => new Option('--mode <mode>', 'block: a charge that would cross the limit is refused; alert: only counted').argParser(parse.oneOf(MODES));
  const thresholds = () => new Option('--alert-thresholds <percents>', 'percents of the limit to alert at, comma-separated (default 80,100)').argParser(parse.percents);

  program
    .command('budgets')
    .description("list an organization's budgets, each with what its window in progress has counted")
    .addArgument(org())
    .action(async (organization: string) => print(await connect().send('GET', url(organization))));
  program
    .command('budget')
    .description('show one budget with its window in progress')
    .addArgument(org())
    .addArgument(id())
    .action(async (organization: string, budget: string) => print(await connect().send('GET', url(organization, budget))));
  program
    .command('budget-create')
    .description('cap what an organization, a deployment, an API key, end users or tools spend in a window')
    .addArgument(org())
    .addArgument(new Argument('<scope>', SCOPES.join('|')).argParser(parse.oneOf(SCOPES)))
    .addArgument(new Argument('<window>', `${WINDOWS.join('|')} (UTC; period: the credit period)`).argParser(parse.oneOf(WINDOWS)))
    .addOption(new Option('--deployment <id>', "the deployment of a deployment budget; for another scope, only that deployment's charges count").argParser(parse.uuid))
    .addOption(new Option('--api-key <id>', "the API key of an api_key budget (its id, not the key)").argParser(parse.apiKeyId))
    .addOption(new Option('--end-user <id>', 'the end user of an end_user budget, "*" for each one separately').argParser(parse.budgetSubject))
    .addOption(new Option('--tool <name>', 'the tool of a tool budget, "*" for each one separately').argParser(parse.budgetSubject))
    .addOption(new Option('--limit-credits <n>', 'credits the window may spend').argParser(parse.budgetLimit))
    .addOption(new Option('--limit-ai-tokens <n>', 'AI tokens (input + output of AI calls) the window may spend').argParser(parse.budgetLimit))
    .addOption(mode())
    .addOption(thresholds())
    .action(async (organization: string, scope: Scope, window: string, options: CreateOptions) => {
      const command = 'budget-create';
      for (const { scope: takes, option, flag } of SCOPE_IDS) {
        if (scope === takes && options[option] === undefined) throw new UsageError(`${command}: a ${scope} budget needs ${flag}; see creditgate ${command} --help`);
        if (scope !== takes && takes !== 'deployment' && options[option] !== undefined) {
          throw new UsageError(`${command}: ${flag.split(' ')[0]} is only for a ${takes} budget; see creditgate ${command} --help`);
        }
      }
      if (options.limitCredits === undefined && options.limitAiTokens === undefined) {
        throw new UsageError(`${command}: name a limit, --limit-credits and/or --limit-ai-tokens; see creditgate ${command} --help`);
      }
      const body = defined({
        scope,
        window,
        ...Object.fromEntries(SCOPE_IDS.map(({ option, field }) => [field, options[option]])),
        limit_credits: options.limitCredits,
        limit_ai_tokens: options.limitAiTokens,
        mode: options.mode,
        alert_thresholds: options.alertThresholds,
      });
      print(await connect().send('POST', url(organization), body));
    });
  program
    .command('budget-update')
    .description('change a budget\'s limits ("null" removes one), window, mode or alert thresholds; its scope and ids stay')
    .addArgument(org())
    .addArgument(id())
    .addOption(new Option('--limit-credits <n>', 'credits the window may spend ("null" removes the limit)').argParser(parse.budgetLimitOrNull))
    .addOption(new Option('--limit-ai-tokens <n>', 'AI tokens the window may spend ("null" removes the limit)').argParser(parse.budgetLimitOrNull))
    .addOption(new Option('--window <window>', WINDOWS.join('|')).argParser(parse.oneOf(WINDOWS)))
    .addOption(mode())
    .addOption(thresholds())
    .action(async (organization: string, budget: string, options: UpdateOptions) => {
      const body = defined({
        limit_credits: parse.orNull(options.limitCredits),
        limit_ai_tokens: parse.orNull(options.limitAiTokens),
        window: options.window,
        mode: options.mode,
        alert_thresholds: options.alertThresholds,
      });
      if (Object.keys(body).length === 0) throw new UsageError('budget-update: name at least one change; see creditgate budget-update --help');
      print(await connect().send('PUT', url(organization, budget), body));
    });
  program
    .command('budget-delete')
    .description('delete a budget and its windows (prints it as it was)')
    .addArgument(org())
    .addArgument(id())
    .action(async (organization: string, budget: string) => print(await connect().send('DELETE', url(organization, budget))));
}
