import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * Every environment variable the service reads (src/config.ts) is listed in .env.example, documented in
 * README's Configuration table and passed through by docker-compose.yml; .env.example lists nothing the
 * service does not read, apart from its marked CLI and docker-compose groups.
 */
const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

const serviceVariables = [...new Set([...read('src/config.ts').matchAll(/\(env, '([A-Z][A-Z0-9_]*)'/g)].map((m) => m[1]!))].sort();
/** Read outside src/config.ts: the CLI's target (src/cli/admin-api.ts), and what docker-compose.yml alone uses. */
const otherVariables = ['CREDITGATE_URL', 'POSTGRES_PASSWORD', 'CREDITGATE_PORT'];

const envExample = read('.env.example');
const listed = [...envExample.matchAll(/^#? ?([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!);

const readme = read('README.md');
const configurationSection = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('\n## ', readme.indexOf('## Configuration') + 1));

describe('.env.example, README and docker-compose.yml name every variable of src/config.ts', () => {
  it('finds the variables', () => {
    expect(serviceVariables.length).toBeGreaterThan(30);
    expect(serviceVariables).toEqual(expect.arrayContaining(['DATABASE_URL', 'JWT_SECRET', 'NODE_ENV', 'REDIS_URL']));
  });

  it('.env.example lists each once, and nothing else', () => {
    expect([...listed].sort()).toEqual([...serviceVariables, ...otherVariables].sort());
  });

  it('the README Configuration table documents each', () => {
    expect(serviceVariables.filter((name) => !configurationSection.includes(`\`${name}\``))).toEqual([]);
  });

  it('docker-compose.yml passes each to the service', () => {
    const compose = read('docker-compose.yml');
    expect(serviceVariables.filter((name) => !new RegExp(`^ {6}${name}: `, 'm').test(compose))).toEqual([]);
  });

  it('.env.example holds no secret: the required ones are empty, the rest placeholders', () => {
    for (const name of ['JWT_SECRET', 'MCP_SERVICE_KEY', 'ADMIN_API_KEY', 'ENCRYPTION_KEY', 'POSTGRES_PASSWORD']) {
      expect(envExample).toMatch(new RegExp(`^${name}=$`, 'm'));
    }
  });
});
