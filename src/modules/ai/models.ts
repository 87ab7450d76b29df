import type { Config } from '../../config.js';

/**
 * Model names as the AI proxy's bounds see them (docs/ai-proxy.md, Model classes). A provider accepts
 * one model under many spellings (`openai/o3`, `O3`, `o3:latest`, `o3-2025-04-16`, `ft:o3:org::id`); the
 * class map, the reasoning list and the image rules are decided on one normalised name so that no
 * spelling of a model is billed as another.
 */

const DATED = [/-\d{4}-\d{2}-\d{2}$/, /-\d{8}$/, /@\d{8}$/, /-\d{4}$/];

/**
 * In this order: lower-case; drop everything up to the last `/`; for `ft:` names take the part between
 * `ft:` and the next `:`; drop a trailing `:tag`; drop a trailing `-YYYY-MM-DD`, `-YYYYMMDD`, `@YYYYMMDD`
 * or `-MMDD`.
 */
export function normaliseModel(raw: string): string {
  let name = raw.toLowerCase();
  name = name.slice(name.lastIndexOf('/') + 1);
  if (name.startsWith('ft:')) {
    const rest = name.slice(3);
    const colon = rest.indexOf(':');
    name = colon === -1 ? rest : rest.slice(0, colon);
  }
  const tag = name.lastIndexOf(':');
  if (tag !== -1) name = name.slice(0, tag);
  for (const date of DATED) {
    if (date.test(name)) {
      name = name.replace(date, '');
      break;
    }
  }
  return name;
}

/** `name` is `base` or one of its variants (`base-…`, `base.…`). */
export function extendsModel(name: string, base: string): boolean {
  return name === base || name.startsWith(`${base}-`) || name.startsWith(`${base}.`);
}

/** A reasoning model: it refuses `max_tokens` and spends reasoning tokens no stream shows (AI_REASONING_MODELS). */
export function isReasoningModel(config: Pick<Config, 'aiReasoningModels'>, model: string): boolean {
  const name = normaliseModel(model);
  return config.aiReasoningModels.some((base) => extendsModel(name, base));
}

/**
 * The models `GET /models` lists and `GET /models/{id}` answers (raw names): AI_MODELS when set, else
 * AI_DEFAULT_MODEL and the models of AI_MODEL_CLASSES.
 */
export function offeredModels(config: Pick<Config, 'aiModels' | 'aiModelClasses' | 'aiDefaultModel'>): string[] {
  return config.aiModels.length > 0 ? config.aiModels : [...new Set([config.aiDefaultModel, ...Object.keys(config.aiModelClasses)])];
}

/**
 * A model that searches the web on every call: OpenAI's `…-search-…` models (`gpt-4o-search-preview`),
 * OpenRouter's `:online` variants. Each call bills a search fee on top of its tokens, which no token
 * bound covers, and the name alone would take the class of the model it extends (docs/ai-proxy.md,
 * Model classes). Decided on the raw name for the tag (normaliseModel drops `:online`) and on the
 * normalised one for the rest.
 */
export function isSearchModel(raw: string): boolean {
  return /:online$/i.test(raw.trim()) || /(^|-)search(-|$)/.test(normaliseModel(raw));
}
