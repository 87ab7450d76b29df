import { FLAGS, type Flags, TIER_TABLE, type Tier } from '../../lib/tiers.js';

/** The tier's flags with an operator's per-flag overrides on top (docs/entitlements.md, Flags and gates). */
export function effectiveFlags(tier: string, overrides: unknown): Flags {
  const flags = { ...TIER_TABLE[tier as Tier].flags };
  if (overrides && typeof overrides === 'object') {
    for (const flag of FLAGS) {
      const value = (overrides as Record<string, unknown>)[flag];
      if (typeof value === 'boolean') flags[flag] = value;
    }
  }
  return flags;
}
