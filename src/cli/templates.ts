import { Argument, type Command, Option } from 'commander';
import { type AdminApi, path } from './admin-api.js';
import * as parse from './arguments.js';
import { UsageError } from './exit-codes.js';

/**
 * The template catalogue commands (docs/cli.md, docs/templates.md): list, create, update, delete through
 * /api/v1/admin/templates. Arguments are checked before anything is sent, like every operator command.
 */
export function addTemplateCommands(program: Command, connect: () => AdminApi, print: (value: unknown) => void): void {
  const id = () => new Argument('<id>', 'template id (a UUID; creditgate templates lists them)').argParser(parse.templateId);
  const fields = (command: Command, clearable: boolean) =>
    command
      .addOption(new Option('--description <text>', `what the template sets up${clearable ? ' ("null" clears it)' : ''}`))
      .addOption(new Option('--category <text>', `grouping for a catalogue page${clearable ? ' ("null" clears it)' : ''}`))
      .addOption(new Option('--icon-url <url>', `http(s) URL of an icon${clearable ? ' ("null" clears it)' : ''}`).argParser(parse.httpUrlOrNull))
      .addOption(new Option('--config <json>', 'the configuration handed to the provisioner, a JSON object').argParser(parse.jsonObject));

  program
    .command('templates')
    .description('list the templates, active or not')
    .action(async () => print(await connect().send('GET', '/api/v1/admin/templates')));

  fields(
    program
      .command('template-create')
      .description('create a template (active unless --inactive)')
      .addArgument(new Argument('<name>', 'display name').argParser(parse.nonEmpty))
      .addArgument(new Argument('<slug>', 'unique slug: a-z, 0-9 and inner hyphens').argParser(parse.slug)),
    false,
  )
    .option('--inactive', 'hidden from GET /templates and new deployments')
    .action(async (name: string, slug: string, options: TemplateOptions & { inactive?: boolean }) => {
      const body = { name, slug, ...given(options), ...(options.inactive ? { is_active: false } : {}) };
      print(await connect().send('POST', '/api/v1/admin/templates', body));
    });

  fields(
    program
      .command('template-update')
      .description('change a template; --inactive hides it from new deployments')
      .addArgument(id())
      .addOption(new Option('--name <name>', 'display name').argParser(parse.nonEmpty))
      .addOption(new Option('--slug <slug>', 'unique slug').argParser(parse.slug)),
    true,
  )
    .addOption(new Option('--active', 'list it and allow new deployments').conflicts('inactive'))
    .addOption(new Option('--inactive', 'hide it from GET /templates and new deployments').conflicts('active'))
    .action(async (template: string, options: TemplateOptions & { name?: string; slug?: string; active?: boolean; inactive?: boolean }) => {
      const body = {
        ...given(options),
        ...(options.active ? { is_active: true } : options.inactive ? { is_active: false } : {}),
      };
      if (Object.keys(body).length === 0) throw new UsageError('template-update: name at least one change; see creditgate template-update --help');
      print(await connect().send('PUT', path`/api/v1/admin/templates/${template}`, body));
    });

  program
    .command('template-delete')
    .description('delete a template no deployment uses (else the service answers 409: use template-update --inactive)')
    .addArgument(id())
    .action(async (template: string) => print(await connect().send('DELETE', path`/api/v1/admin/templates/${template}`)));
}

interface TemplateOptions {
  description?: string;
  category?: string;
  iconUrl?: string;
  config?: Record<string, unknown>;
}

/** The fields that were given, named as the API names them; the word "null" clears a text field. */
function given(options: TemplateOptions & { name?: string | undefined; slug?: string | undefined }): Record<string, unknown> {
  const body: Record<string, unknown> = {
    name: options.name,
    slug: options.slug,
    description: nullable(options.description),
    category: nullable(options.category),
    icon_url: nullable(options.iconUrl),
    config: options.config,
  };
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
}

const nullable = (value: string | undefined): string | null | undefined => (value === 'null' ? null : value);
