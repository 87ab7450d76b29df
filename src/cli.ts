#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { type AdminApi, adminApi, baseUrl } from './cli/admin-api.js';
import { addAutoTopUpCommands } from './cli/auto-top-up.js';
import { applyServeV8Flags } from './node-flags.js';
import { addBudgetCommands } from './cli/budgets.js';
import { addDeploymentCommands } from './cli/deployments.js';
import { addTemplateCommands } from './cli/templates.js';
import { EXIT, UsageError } from './cli/exit-codes.js';

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
Operator commands send ADMIN_API_KEY (from the environment; else DATA_DIR/secrets.json, for a service
on this machine only) to --url, CREDITGATE_URL, or http://HOST:PORT; plain http only to this machine
unless --insecure-http.

Exit codes: 0 ok; 1 the service answered an error or could not be reached; 2 a usage error (bad
command, argument or option) or invalid configuration; 3 the data directory is used by another process;
4 serve could not listen on its port.
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
    .option('--insecure-http', 'send ADMIN_API_KEY over plain http to a host other than this machine (refused without it)')
    .helpOption('-h, --help', 'show help')
    .helpCommand('help [command]', 'show help for a command')
    // Errors become a CommanderError that run() maps to an exit code; subcommands inherit both settings.
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(errorLine(program, text)) })
    .addHelpText('after', AFTER_HELP);

  const connect = (): AdminApi => {
    const options = program.opts<{ url?: string; insecureHttp?: boolean }>();
    return adminApi(baseUrl(options.url), process.env, { allowInsecureHttp: options.insecureHttp === true });
  };

  program.commandsGroup('Service:');
  program
    .command('serve')
    .description('start the service (also what npm start and creditgate without a command do)')
    .action(async () => {
      applyServeV8Flags();
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
  addDeploymentCommands(program, connect, print);
  addTemplateCommands(program, connect, print);
  addBudgetCommands(program, connect, print);
  addAutoTopUpCommands(program, connect, print);

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
