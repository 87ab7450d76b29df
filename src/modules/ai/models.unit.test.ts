import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { type Config, loadConfig } from '../../config.js';
import { modelClassOf } from '../quotas/ai-tokens.js';
import { imageRuleOf } from './images.js';
import { isReasoningModel, isSearchModel, normaliseModel } from './models.js';
import { encodingOf } from './tokens.js';

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
    ['llama3.1:8b', 'llama3.1:8b'],
    ['llama3.1:latest', 'llama3.1'],
    ['openai/gpt-4o:nitro', 'gpt-4o'],
    ['meta-llama/Llama-3.1-8B-Instruct:free', 'llama-3.1-8b-instruct'],
    ['anthropic/claude-3.7-sonnet:thinking', 'claude-3.7-sonnet:thinking'],
    [' o3', 'o3'],
    ['o3 ', 'o3'],
    ['o3\n', 'o3'],
    ['\to3', 'o3'],
    ['o\u200b3', 'o3'],
    [' GPT-4o-mini\r\n', 'gpt-4o-mini'],
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

  it('never leaves an upper-case letter, a provider prefix, surrounding whitespace or a control character; keeps every tag but the same-model ones', () => {
    // Only tags that name the same model are dropped (docs/ai-proxy.md, Model classes): a size tag is
    // another model at another price, and `o3::` stays `o3:`, a name no class map places.
    fc.assert(
      fc.property(fc.string({ maxLength: 60 }), (raw) => {
        const n = normaliseModel(raw);
        return n === n.toLowerCase() && !n.includes('/') && n === n.trim() && !/[\p{Cc}\p{Cf}]/u.test(n) && !/:(latest|free|nitro|floor|online)$/.test(n);
      }),
    );
    fc.assert(
      // `ft:…` is the fine-tune wrapper (`ft:<base>:…`), not a model named `ft` with a size tag.
      fc.property(fc.stringMatching(/^[a-z][a-z0-9.]{0,12}[a-z]:[0-9]{1,3}b$/).filter((s) => !s.startsWith('ft:')), (sized) => {
        expect(normaliseModel(sized)).toBe(sized);
      }),
    );
    expect(normaliseModel('::')).toBe('::');
    expect(normaliseModel('o3::latest')).toBe('o3:');
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

describe('whitespace and control characters around a name', () => {
  it('keep its image rule, its encoding and the search rule', () => {
    for (const model of [' gpt-4o-mini', 'gpt-4o-mini ', 'gpt-4o-mini\n']) expect(imageRuleOf(model), JSON.stringify(model)).toEqual(imageRuleOf('gpt-4o-mini'));
    expect(imageRuleOf('gpt-4o-mini')).not.toBeNull();
    for (const model of [' gpt-4', 'gpt-4\t']) expect(encodingOf(model), JSON.stringify(model)).toBe('cl100k_base');
    expect(isSearchModel('openai/gpt-4o:online\u0001')).toBe(true);
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
    // Whitespace or a control character around the name does not make it another model.
    for (const model of [' o3', 'o3 ', 'o3\n', '\to3', ' gpt-5-mini']) expect(isReasoningModel(config, model), JSON.stringify(model)).toBe(true);
    const custom = defaults({ AI_REASONING_MODELS: 'DeepSeek-R1, qwq' });
    expect(isReasoningModel(custom, 'deepseek/deepseek-r1')).toBe(true);
    // A tagged build (Ollama's sizes) of a reasoning model reasons too.
    expect(isReasoningModel(custom, 'deepseek-r1:70b')).toBe(true);
    expect(isReasoningModel(custom, 'o3')).toBe(false);
  });
});

/** docs/ai-proxy.md, Model classes: AI_MODEL_CLASSES keys are matched as written, then normalised like the names. */
describe('AI_MODEL_CLASSES keys', () => {
  it('a size tag is its own model: `llama3.1:8b` is the listed class, `llama3.1:405b` is not the 8b\'s', () => {
    const config = defaults({ AI_MODEL_CLASSES: 'llama3.1:8b=standard,llama3.1=standard' });
    expect(modelClassOf({ config }, 'llama3.1:8b')).toBe('standard');
    expect(modelClassOf({ config }, 'ollama/llama3.1:8b')).toBe('standard');
    expect(modelClassOf({ config }, 'llama3.1:latest')).toBe('standard');
    expect(modelClassOf({ config }, 'llama3.1:405b')).toBe('premium');
  });

  it('upper-case and provider-prefixed keys match every spelling of their model', () => {
    const config = defaults({ AI_MODEL_CLASSES: 'GPT-4o-mini=standard,openai/gpt-4.1-nano=standard' });
    for (const model of ['GPT-4o-mini', 'gpt-4o-mini', 'openai/gpt-4o-mini', ' gpt-4o-mini', 'gpt-4.1-nano', 'GPT-4.1-NANO']) {
      expect(modelClassOf({ config }, model), model).toBe('standard');
    }
  });

  it('the exact raw name is matched before the normalised one', () => {
    const ctx = { config: { ...defaults(), aiModelClasses: { 'acme/fast': 'standard', fast: 'advanced' } } } satisfies Parameters<typeof modelClassOf>[0];
    expect(modelClassOf(ctx, 'acme/fast')).toBe('standard');
    // A map built without the configuration's check keeps the dearer class for the name both keys share.
    expect(modelClassOf(ctx, 'other/fast')).toBe('advanced');
  });

  it('two keys that normalise to one name are refused at start, naming the variable', () => {
    expect(() => defaults({ AI_MODEL_CLASSES: 'gpt-4o=advanced,openai/GPT-4o=standard' })).toThrow(/^AI_MODEL_CLASSES: "gpt-4o" and "openai\/GPT-4o" both name the model "gpt-4o"/);
    expect(() => defaults({ AI_MODEL_CLASSES: 'llama3.1=standard,llama3.1:latest=standard' })).toThrow(/^AI_MODEL_CLASSES: .*both name the model "llama3.1"/);
    expect(() => defaults({ AI_MODEL_CLASSES: 'o3=premium,o3=standard' })).toThrow(/^AI_MODEL_CLASSES: lists "o3" twice/);
    expect(() => defaults({ AI_MODEL_CLASSES: 'llama3.1:8b=standard,llama3.1:70b=advanced' })).not.toThrow();
  });
});
