import { Type } from 'typebox';
import { Nullable } from '../../http/schemas.js';
import type { BalanceView } from './service.js';

/** A deployment's balance as the operator API and the organization API show it. */
export interface BalanceSummary {
  period_start: string;
  period_end: string;
  monthly_allocation: number | null;
  monthly_used: number;
  monthly_remaining: number | null;
  purchased: number;
  reserved: number;
  available: number | null;
  ai_tokens_used: number;
}

export function summarizeBalance(b: BalanceView): BalanceSummary {
  return {
    period_start: b.periodStart.toISOString(),
    period_end: b.periodEnd.toISOString(),
    monthly_allocation: b.monthlyAllocation,
    monthly_used: b.monthlyUsed,
    monthly_remaining: b.monthlyRemaining,
    purchased: b.purchased,
    reserved: b.reserved,
    available: b.available,
    ai_tokens_used: b.aiTokensUsed,
  };
}

const Timestamp = (description: string) => Type.String({ format: 'date-time', description });
const Credits = (description: string) => Type.Integer({ description, examples: [1500] });
const NullableCredits = (description: string) => Nullable(Type.Integer({ description, examples: [1500] }));

export const BalanceSummarySchema = Type.Object(
  {
    period_start: Timestamp('Start of the current period'),
    period_end: Timestamp('End of the current period (the monthly allocation and AI tokens reset then)'),
    monthly_allocation: NullableCredits('Credits granted this period; null = unlimited'),
    monthly_used: Credits('Monthly credits used this period'),
    monthly_remaining: NullableCredits('Monthly credits left; null = unlimited'),
    purchased: Credits('Purchased credits (never reset)'),
    reserved: Credits('Credits held by open reservations'),
    available: NullableCredits('What a new call may spend: monthly remaining + purchased − reserved; null = unlimited'),
    ai_tokens_used: Type.Integer({ description: 'AI tokens used this period', examples: [1200] }),
  },
  { title: 'CreditBalance', description: 'Credit balance summary, current at the time of the request' },
);
