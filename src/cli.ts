#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Argument, Command, CommanderError, Option } from 'commander';
import { type AdminApi, adminApi, baseUrl, path } from './cli/admin-api.js';
import * as parse from './cli/arguments.js';
import { addTemplateCommands } from './cli/templates.js';
import { EXIT, UsageError } from './cli/exit-codes.js';
import { TIERS } from './modules/entitlements/tiers.js';

/**
 * `creditgate`: run the service, or operate a running one through the admin API (docs/cli.md).
 * Arguments are checked before anything is sent; errors are one line on stderr; exit codes are
 * documented in docs/cli.md and defined in cli/exit-codes.ts. The service's modules are imported only
 * by `serve` and `migrate`, so an operator command starts in a fraction of the time.
 */

/** package.json is one level up from src/cli.ts (tsx) and from dist/cli.js alike. */
function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

const print = (value: unknown): void => {
  process.stdout.write(`${typeof value === 'string' ? value : JSON.stringify(value, null, 2)}\n`);
};

const AFTER_HELP = `
Without a command, creditgate serves (like creditgate serve).
Operator commands send ADMIN_API_KEY (from the environment, else DATA_DIR/secrets.json) to --url,
CREDITGATE_URL, or http://HOST:PORT.

Exit codes: 0 ok; 1 the service answered an error or could not be reached; 2 a usage error (bad
command, argument or option) or invalid configuration; 3 the data directory is used by another process.
Every command: creditgate help COMMAND. Reference: docs/cli.md`;

/** Commander's error lines, as one line naming the command and where its usage is. */
function errorLine(command: Command, text: string): string {
  const name = command.parent ? `creditgate ${command.name()}` : 'creditgate';
  const line = text
    .trim()
    .replace(/^error: /, '')
    .replace(/^command-argument value '(.*)' is invalid for argument '(.*)'\. /s, "$2 '$1' ")
    .replace(/^option '(--[a-z-]+)[^']*' argument '(.*)' is invalid\. /s, "$1 '$2' ")
    .replace(/\s*\n\(Did you mean (.+)\?\)$/, ' (did you mean $1?)')
    .replace(/\s+/g, ' ');
  return `${name}: ${line}; see ${name} --help\n`;
}

/**
 * Commander answers `help nope` and `nope --help` with the general help; make both the
 * unknown-command error (with commander's suggestion) by dropping the help request.
 */
function unknownCommandFirst(argv: string[], program: Command): string[] {
  const known = new Set(program.commands.map((c) => c.name()));
  const i = argv.findIndex((arg, j) => !arg.startsWith('-') && argv[j - 1] !== '--url');
  const name = argv[i];
  if (name === undefined) return argv;
  if (name === 'help') {
    const target = argv[i + 1];
    return target !== undefined && !target.startsWith('-') && !known.has(target) ? argv.filter((_, j) => j !== i) : argv;
  }
  return known.has(name) ? argv : argv.filter((arg) => arg !== '-h' && arg !== '--help');
}

function buildProgram(): Command {
  const program = new Command('creditgate')
    .description('Credit-metered platform API: run the service, or operate a running one.')
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--url <url>', 'the running service, for operator commands (default: $CREDITGATE_URL, else http://$HOST:$PORT)')
    .helpOption('-h, --help', 'show help')
    .helpCommand('help [command]', 'show help for a command')
    // Errors become a CommanderError that run() maps to an exit code; subcommands inherit both settings.
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(errorLine(program, text)) })
    .addHelpText('after', AFTER_HELP);

  const connect = (): AdminApi => adminApi(baseUrl(program.opts<{ url?: string }>().url));
  const id = () => new Argument('<id>', 'deployment id (a UUID; creditgate deployments lists them)').argParser(parse.uuid);

  program.commandsGroup('Service:');
  program
    .command('serve')
    .description('start the service (also what npm start and creditgate without a command do)')
    .action(async () => {
      const { serve } = await import('./main.js');
      await serve();
    });
  program
    .command('migrate')
    .description('apply the database migrations and exit')
    .action(async () => {
      const { migrate } = await import('./main.js');
      await migrate();
      print('migrations applied');
    });
  program
    .command('demo')
    .description('provision a demo organization on a running service and print curl lines that use it')
    .action(async () => {
      const { demo } = await import('./cli/demo.js');
      await demo(connect());
    });

  program.commandsGroup('Operator commands (a running service, ADMIN_API_KEY):');
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
    .argument('<action>', 'action name (a-z 0-9 _ . -)')
    .addArgument(new Argument('<credits>', 'whole number of credits, 0 or more').argParser(parse.count))
    .action(async (action: string, credits: number) => print(await connect().send('PUT', path`/api/v1/admin/credit-costs/${action}`, { credits })));
  program
    .command('map-tool')
    .description('meter TOOL as ACTION (a tool with no mapping costs platform_basic)')
    .addArgument(new Argument('<tool>', 'tool name as the MCP server reports it').argParser(parse.nonEmpty))
    .addArgument(new Argument('<action>', 'an action of the cost table').argParser(parse.nonEmpty))
    .action(async (tool: string, action: string) => print(await connect().send('PUT', path`/api/v1/admin/tool-actions/${tool}`, { action })));
  addTemplateCommands(program, connect, print);

  for (const command of program.commands) command.configureOutput({ outputError: (text, write) => write(errorLine(command, text)) });
  return program;
}

/** Parse and run; the exit code (docs/cli.md). */
async function run(argv: string[]): Promise<number> {
  try {
    const program = buildProgram();
    await program.parseAsync(argv.length === 0 ? ['serve'] : unknownCommandFirst(argv, program), { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    // Commander printed its message (or the help, or the version) already.
    if (err instanceof CommanderError) {
      if (err.code === 'commander.help' && err.exitCode !== 0) process.stderr.write('creditgate: no command given; see creditgate --help\n');
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    process.stderr.write(`creditgate: ${(err as Error).message}\n`);
    return err instanceof UsageError ? EXIT.usage : EXIT.failed;
  }
}

process.exitCode = await run(process.argv.slice(2));
