import { describe, expect, it } from 'vitest';
import { DEFAULT_MODEL_CLASSES } from '../../config.js';
import { modelClassOf } from './ai-tokens.js';

/** docs/ai-proxy.md, Model classes: the model → class map decides the credit rate past the quota; snapshots of a model keep its class. */
describe('modelClassOf', () => {
  const ctx = { config: { aiModelClasses: DEFAULT_MODEL_CLASSES, aiDefaultModelClass: 'standard' as const } } as Parameters<typeof modelClassOf>[0];

  it('takes a listed model\'s own class', () => {
    expect(modelClassOf(ctx, 'gpt-4o')).toBe('advanced');
    expect(modelClassOf(ctx, 'gpt-4o-mini')).toBe('standard');
    expect(modelClassOf(ctx, 'o3')).toBe('premium');
  });

  it('gives a dated snapshot or variant the class of the longest listed name it extends', () => {
    expect(modelClassOf(ctx, 'gpt-4o-2024-08-06')).toBe('advanced');
    expect(modelClassOf(ctx, 'gpt-4o-mini-2024-07-18')).toBe('standard');
    expect(modelClassOf(ctx, 'o1-preview')).toBe('premium');
    expect(modelClassOf(ctx, 'gpt-4.1-2025-04-14')).toBe('advanced');
    expect(modelClassOf(ctx, 'gpt-4.1-nano-2025-04-14')).toBe('standard');
  });

  it('takes AI_DEFAULT_MODEL_CLASS for anything else, without matching inside a name', () => {
    expect(modelClassOf(ctx, 'llama-3.1-70b')).toBe('standard');
    expect(modelClassOf(ctx, 'gpt-4omni')).toBe('standard');
    expect(modelClassOf({ config: { ...ctx.config, aiDefaultModelClass: 'premium' } }, 'mystery')).toBe('premium');
  });
});
