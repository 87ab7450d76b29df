import type { Config } from '../../config.js';

/**
 * Model names as the AI proxy's bounds see them (docs/ai-proxy.md, Model classes). A provider accepts
 * one model under many spellings (`openai/o3`, `O3`, `o3:latest`, `o3-2025-04-16`, `ft:o3:org::id`); the
 * class map, the reasoning list and the image rules are decided on one normalised name so that no
 * spelling of a model is billed as another.
 */

const DATED = [/-\d{4}-\d{2}-\d{2}$/, /-\d{8}$/, /@\d{8}$/, /-\d{4}$/];

/**
 * Tags that name the same model, dropped: Ollama's `:latest` (its default tag) and OpenRouter's routing
 * variants `:free`, `:nitro`, `:floor` (which provider serves it) and `:online` (refused unless search
 * fees are taken on: isSearchModel). Every other tag is kept: a size or quantisation (`llama3.1:8b`,
 * `llama3.1:405b`) is another model at another price, and so are `:thinking` and `:extended`.
 */
const SAME_MODEL_TAGS = new Set(['latest', 'free', 'nitro', 'floor', 'online']);

/**
 * The name without control or format characters (a newline, a zero-width space) and without leading or
 * trailing whitespace: `" o3"`, `"o3\n"` are o3 to every rule, whatever the provider makes of them.
 */
function cleaned(raw: string): string {
  return raw.replace(/[\p{Cc}\p{Cf}]/gu, '').trim();
}

/**
 * In this order: strip control and format characters and surrounding whitespace; lower-case; drop
 * everything up to the last `/`; for `ft:` names take the part between `ft:` and the next `:`; drop a
 * trailing tag that names the same model (SAME_MODEL_TAGS); drop a trailing `-YYYY-MM-DD`, `-YYYYMMDD`,
 * `@YYYYMMDD` or `-MMDD`.
 */
export function normaliseModel(raw: string): string {
  let name = cleaned(raw).toLowerCase();
  // What follows a provider prefix is trimmed again (`openai/ o3`); so is what is left at the end.
  name = name.slice(name.lastIndexOf('/') + 1).trim();
  if (name.startsWith('ft:')) {
    const rest = name.slice(3);
    const colon = rest.indexOf(':');
    name = colon === -1 ? rest : rest.slice(0, colon);
  }
  for (let tag = name.lastIndexOf(':'); tag !== -1 && SAME_MODEL_TAGS.has(name.slice(tag + 1)); tag = name.lastIndexOf(':')) name = name.slice(0, tag);
  for (const date of DATED) {
    if (date.test(name)) {
      name = name.replace(date, '');
      break;
    }
  }
  return name.trim();
}

/**
 * AI_MODEL_CLASSES by normalised name (docs/ai-proxy.md, Model classes). Two keys that normalise to one
 * name are refused when the configuration is loaded (`collisions`); a map built elsewhere that has them
 * keeps the dearer class.
 */
export function classesByNormalisedName<C extends string>(classes: Record<string, C>, rank: readonly C[]): { byName: Map<string, C>; collisions: Array<[string, string, string]> } {
  const byName = new Map<string, C>();
  const firstKey = new Map<string, string>();
  const collisions: Array<[string, string, string]> = [];
  for (const [key, cls] of Object.entries(classes)) {
    const name = normaliseModel(key);
    const seen = byName.get(name);
    if (seen === undefined) {
      byName.set(name, cls);
      firstKey.set(name, key);
      continue;
    }
    collisions.push([firstKey.get(name)!, key, name]);
    if (rank.indexOf(cls) > rank.indexOf(seen)) byName.set(name, cls);
  }
  return { byName, collisions };
}

/**
 * `name` is `base` or one of its variants (`base-…`, `base.…`, a tagged build `base:…`): for the
 * reasoning list and the image rules, where the variant's is the safe side (a full hold, the family's
 * image tokens). The class map does not take tagged builds as variants (quotas/ai-tokens.ts).
 */
export function extendsModel(name: string, base: string): boolean {
  return name === base || name.startsWith(`${base}-`) || name.startsWith(`${base}.`) || name.startsWith(`${base}:`);
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
  return /:online$/i.test(cleaned(raw)) || /(^|-)search(-|$)/.test(normaliseModel(raw));
}
