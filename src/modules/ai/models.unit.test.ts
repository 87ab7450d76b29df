import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { type Config, loadConfig } from '../../config.js';
import { modelClassOf } from '../quotas/ai-tokens.js';
import { isReasoningModel, normaliseModel } from './models.js';

/** docs/ai-proxy.md, Model classes: one normalised name per model, whatever its spelling. */
const dataDir = mkdtempSync(join(tmpdir(), 'creditgate-models-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** The configuration a deployment gets with no AI variable set. */
function defaults(env: Record<string, string> = {}): Config {
  const secrets = { JWT_SECRET: 'j'.repeat(40), MCP_SERVICE_KEY: 'm'.repeat(30), ADMIN_API_KEY: 'a'.repeat(30), ENCRYPTION_KEY: 'e'.repeat(40) };
  return loadConfig({ DATA_DIR: dataDir, ...secrets, ...env }).config;
}

describe('normaliseModel', () => {
  it.each([
    ['o3', 'o3'],
    ['O3', 'o3'],
    ['openai/o3', 'o3'],
    ['azure/o3', 'o3'],
    ['openrouter/openai/GPT-4o', 'gpt-4o'],
    ['o3:latest', 'o3'],
    ['llama3.1:8b', 'llama3.1'],
    ['ft:gpt-4o:acme::abc123', 'gpt-4o'],
    ['ft:gpt-4o-mini-2024-07-18:acme:name:id', 'gpt-4o-mini'],
    ['openai/ft:gpt-4.1:org::x', 'gpt-4.1'],
    ['gpt-4o-2024-08-06', 'gpt-4o'],
    ['claude-3-5-sonnet-20241022', 'claude-3-5-sonnet'],
    ['gemini-1.5-pro@20240514', 'gemini-1.5-pro'],
    ['gpt-3.5-turbo-0125', 'gpt-3.5-turbo'],
    ['chatgpt-4o-latest', 'chatgpt-4o-latest'],
    ['text-embedding-3-small', 'text-embedding-3-small'],
  ])('%s → %s', (raw, normalised) => {
    expect(normaliseModel(raw)).toBe(normalised);
  });

  const name = fc.stringMatching(/^[a-z][a-z0-9.-]{0,20}[a-z]$/).filter((n) => n === normaliseModel(n));
  const date = fc.oneof(
    fc.date({ min: new Date('2020-01-01'), max: new Date('2030-12-31'), noInvalidDate: true }).map((d) => `-${d.toISOString().slice(0, 10)}`),
    fc.integer({ min: 20200101, max: 20301231 }).map((n) => `-${n}`),
    fc.integer({ min: 20200101, max: 20301231 }).map((n) => `@${n}`),
    fc.integer({ min: 101, max: 1231 }).map((n) => `-${String(n).padStart(4, '0')}`),
  );

  it('never leaves an upper-case letter or a provider prefix; a name with one tag loses it', () => {
    // Only one trailing tag is dropped (docs/ai-proxy.md, Model classes): `o3::` stays `o3:`, a name no
    // class map places, so it bills at the default (dearest) class rather than as another model.
    const colons = (s: string) => (s.slice(s.lastIndexOf('/') + 1).match(/:/g) ?? []).length;
    fc.assert(
      fc.property(fc.string({ maxLength: 60 }), (raw) => {
        const n = normaliseModel(raw);
        return n === n.toLowerCase() && !n.includes('/') && (colons(raw) > 1 || !n.includes(':'));
      }),
    );
    expect(normaliseModel('::')).toBe(':');
  });

  it('every spelling of a model (case, provider prefix, tag, date, ft: wrapper) comes back to its name', () => {
    fc.assert(
      fc.property(
        name,
        fc.option(fc.constantFrom('openai/', 'azure/', 'openrouter/openai/'), { nil: '' }),
        fc.option(date, { nil: '' }),
        fc.option(fc.constantFrom(':latest', ':free'), { nil: '' }),
        fc.boolean(),
        fc.boolean(),
        (base, prefix, dated, tag, upper, fineTuned) => {
          let raw = `${base}${dated}`;
          if (fineTuned) raw = `ft:${raw}:acme::x1`;
          raw = `${prefix}${raw}${fineTuned ? '' : tag}`;
          if (upper) raw = raw.toUpperCase();
          expect(normaliseModel(raw)).toBe(base);
        },
      ),
    );
  });
});

describe('model classes with the default configuration', () => {
  const config = defaults();

  it('the default class is premium, the safe side', () => {
    expect(config.aiDefaultModelClass).toBe('premium');
    expect(defaults({ AI_DEFAULT_MODEL_CLASS: 'standard' }).aiDefaultModelClass).toBe('standard');
  });

  it('no spelling of o3 or gpt-4o is billed as a cheaper class (the attack: all of these were standard)', () => {
    for (const model of ['openai/o3', 'azure/o3', 'O3', 'o3:latest', 'o3-2025-04-16', 'chatgpt-4o-latest', 'some-new-model']) {
      expect(modelClassOf({ config }, model), model).toBe('premium');
    }
    for (const model of ['ft:gpt-4o:acme::abc123', 'openai/gpt-4o', 'GPT-4o-2024-08-06']) expect(modelClassOf({ config }, model), model).toBe('advanced');
    for (const model of ['gpt-4o-mini', 'openai/gpt-4o-mini-2024-07-18', 'text-embedding-3-small']) expect(modelClassOf({ config }, model), model).toBe('standard');
  });

  it('a name that is an Object property is not a class', () => {
    expect(modelClassOf({ config }, 'constructor')).toBe('premium');
    expect(modelClassOf({ config }, '__proto__')).toBe('premium');
  });

  it('reasoning models by normalised name and their variants; AI_REASONING_MODELS replaces the list', () => {
    for (const model of ['o1', 'o3', 'openai/o3', 'o3-mini', 'o4-mini-2025-04-16', 'gpt-5', 'gpt-5-mini', 'gpt-5.1', 'O1-PREVIEW']) {
      expect(isReasoningModel(config, model), model).toBe(true);
    }
    for (const model of ['gpt-4o', 'gpt-4.1-mini', 'o30-thing', 'gpt-50', 'llama3.1:8b']) expect(isReasoningModel(config, model), model).toBe(false);
    const custom = defaults({ AI_REASONING_MODELS: 'DeepSeek-R1, qwq' });
    expect(isReasoningModel(custom, 'deepseek/deepseek-r1')).toBe(true);
    expect(isReasoningModel(custom, 'o3')).toBe(false);
  });
});
