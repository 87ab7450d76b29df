import type {
  AiQuota,
  Budget,
  BudgetCreateInput,
  BudgetRefusal,
  BudgetSubject,
  BudgetUpdateInput,
  CreditCost,
  CreditCosts,
  CreditgateClient,
  CreditgateError,
  DenialReason,
  EntitlementSnapshot,
  InvocationStatus,
  PaymentRequired,
  RecordResult,
  RefundInput,
  RefundResult,
  ReleaseResult,
  ResolveResult,
  ServiceCheckInput,
  ServiceCheckResult,
  ServiceUsageInput,
  ServiceUsageResult,
  StdioCheckInput,
  StdioCheckResult,
  StdioRecordInput,
  WebhookDeliveries,
  WebhookDelivery,
  WebhookQuota,
  WebhookSendInput,
  WebhookSendResult,
  WithReplay,
} from '@creditgate/client';
import { describe, expectTypeOf, it } from 'vitest';

/**
 * Compile-time checks (`tsc --noEmit`) that the types generated from the service's OpenAPI document
 * still carry the documented fields (docs/client.md) with their types: if a schema loses or retypes a field, these fail
 * to compile. At run time the assertions are no-ops.
 */
type Reasons = 'sandbox_tier' | 'insufficient_credits' | 'no_deployment_found' | 'deployment_not_found' | 'mcp_disabled' | 'budget_exceeded';

describe('exported types (checked by tsc)', () => {
  it('stdio mode: check and record', () => {
    expectTypeOf<StdioCheckInput['tool_name']>().toEqualTypeOf<string>();
    expectTypeOf<StdioCheckInput>().toHaveProperty('reserve').toEqualTypeOf<boolean | undefined>();
    expectTypeOf<StdioCheckResult['allowed']>().toEqualTypeOf<boolean>();
    expectTypeOf<StdioCheckResult['credit_cost']>().toEqualTypeOf<number>();
    expectTypeOf<StdioCheckResult['tier']>().toEqualTypeOf<string | null>();
    expectTypeOf<StdioCheckResult['reason']>().toEqualTypeOf<Reasons | null>();
    expectTypeOf<DenialReason>().toEqualTypeOf<Reasons>();
    expectTypeOf<StdioCheckResult>().toHaveProperty('invocation_id').toEqualTypeOf<string | undefined>();
    expectTypeOf<StdioCheckResult>().not.toHaveProperty('credits_available');
    expectTypeOf<StdioRecordInput['tool_name']>().toEqualTypeOf<string>();
    expectTypeOf<StdioRecordInput>().toHaveProperty('metadata').toEqualTypeOf<Record<string, unknown> | null | undefined>();
    expectTypeOf<StdioRecordInput>().toHaveProperty('invocation_id').toEqualTypeOf<string | undefined>();
    expectTypeOf<RecordResult['success']>().toEqualTypeOf<boolean>();
    expectTypeOf<RecordResult['credits_used']>().toEqualTypeOf<number>();
    expectTypeOf<RecordResult['credits_remaining']>().toEqualTypeOf<number | null>();
    expectTypeOf<WithReplay<RecordResult>['replayed']>().toEqualTypeOf<boolean>();
  });

  it('service mode', () => {
    expectTypeOf<ResolveResult>().toEqualTypeOf<{
      deployment_id: string | null;
      organization_id: string | null;
      tier: string | null;
      mcp_enabled: boolean;
      error: string | null;
    }>();
    expectTypeOf<ServiceCheckInput['deployment_id']>().toEqualTypeOf<string>();
    expectTypeOf<ServiceCheckInput['tool_name']>().toEqualTypeOf<string>();
    expectTypeOf<ServiceCheckResult['allowed']>().toEqualTypeOf<boolean>();
    expectTypeOf<ServiceCheckResult['credits_available']>().toEqualTypeOf<number | null>();
    expectTypeOf<ServiceCheckResult['reason']>().toEqualTypeOf<Reasons | null>();
    expectTypeOf<ServiceUsageInput>().toHaveProperty('mcp_user_id').toEqualTypeOf<string | null | undefined>();
    expectTypeOf<ServiceUsageResult['error']>().toEqualTypeOf<string | null>();
    expectTypeOf<ServiceUsageResult['credits_remaining']>().toEqualTypeOf<number | null>();
    expectTypeOf<CreditCosts['costs']>().toEqualTypeOf<CreditCost[]>();
    expectTypeOf<CreditCost>().toEqualTypeOf<{ action: string; credits: number; description: string | null }>();
  });

  it('reservations, invocations and refunds', () => {
    expectTypeOf<ReleaseResult>().toEqualTypeOf<{ invocation_id: string; status: string; released_credits: number }>();
    expectTypeOf<InvocationStatus['status']>().toEqualTypeOf<string>();
    expectTypeOf<InvocationStatus['usage_id']>().toEqualTypeOf<string | null>();
    expectTypeOf<InvocationStatus['reserved_credits']>().toEqualTypeOf<number>();
    expectTypeOf<RefundInput['reason']>().toEqualTypeOf<string>();
    expectTypeOf<RefundInput>().toHaveProperty('amount').toEqualTypeOf<number | undefined>();
    expectTypeOf<RefundResult['credits_refunded']>().toEqualTypeOf<number>();
    expectTypeOf<RefundResult['credits_remaining']>().toEqualTypeOf<number | null>();
  });

  it('entitlement snapshot and AI quota', () => {
    expectTypeOf<EntitlementSnapshot['status']>().toEqualTypeOf<string>();
    expectTypeOf<EntitlementSnapshot['tier']>().toEqualTypeOf<string>();
    expectTypeOf<EntitlementSnapshot['next_check_seconds']>().toEqualTypeOf<number>();
    expectTypeOf<EntitlementSnapshot['message']>().toEqualTypeOf<string | null>();
    expectTypeOf<EntitlementSnapshot['features']>().toEqualTypeOf<{
      ai_enabled: boolean;
      billing_enabled: boolean;
      custom_domain: boolean;
      white_label: boolean;
      mcp_enabled: boolean;
      ai_monthly_limit: number | null;
      api_rate_limit: number | null;
      support_level: string;
    }>();
    expectTypeOf<EntitlementSnapshot['quotas']['ai_tokens']>().toEqualTypeOf<{
      used: number;
      limit: number | null;
      remaining: number | null;
      resets_at: string;
    }>();
    expectTypeOf<AiQuota['credits_available']>().toEqualTypeOf<number | null>();
    expectTypeOf<AiQuota['credits_per_standard']>().toEqualTypeOf<number>();
    expectTypeOf<AiQuota['credits_per_advanced']>().toEqualTypeOf<number>();
    expectTypeOf<AiQuota['credits_per_premium']>().toEqualTypeOf<number>();
    expectTypeOf<AiQuota['tier']>().toEqualTypeOf<string>();
  });

  it('webhook proxy (camelCase answers)', () => {
    expectTypeOf<WebhookSendInput['url']>().toEqualTypeOf<string>();
    expectTypeOf<WebhookSendInput['payload']>().toExtend<Record<string, unknown>>();
    expectTypeOf<WebhookSendInput>().toHaveProperty('method').toEqualTypeOf<'POST' | 'PUT' | 'PATCH' | undefined>();
    expectTypeOf<WebhookSendInput>().toHaveProperty('idempotency_key').toEqualTypeOf<string | undefined>();
    expectTypeOf<WebhookSendResult>().toEqualTypeOf<{
      success: boolean;
      webhookId: string;
      statusCode: number | null;
      responseBody: string | null;
      error: string | null;
      creditsUsed: number;
      creditsRemaining: number | null;
      attempts: number;
      deliveredAt: string | null;
    }>();
    expectTypeOf<WebhookQuota>().toEqualTypeOf<{
      creditsAvailable: number | null;
      creditsPerWebhook: number;
      webhooksAvailable: number | null;
      periodEnds: string;
    }>();
    expectTypeOf<WebhookDeliveries['data']>().toEqualTypeOf<WebhookDelivery[]>();
    expectTypeOf<WebhookDeliveries['next_cursor']>().toEqualTypeOf<string | null>();
    expectTypeOf<WebhookDelivery['attempt_count']>().toEqualTypeOf<number>();
  });

  it('budgets and budget refusals', () => {
    expectTypeOf<Budget['id']>().toEqualTypeOf<string>();
    expectTypeOf<Budget['scope']>().toEqualTypeOf<'organization' | 'deployment' | 'api_key' | 'end_user' | 'tool'>();
    expectTypeOf<Budget['window']>().toEqualTypeOf<'hour' | 'day' | 'week' | 'month' | 'period'>();
    expectTypeOf<Budget['mode']>().toEqualTypeOf<'block' | 'alert'>();
    expectTypeOf<Budget['limit_credits']>().toEqualTypeOf<number | null>();
    expectTypeOf<Budget['spent_credits']>().toEqualTypeOf<number | null>();
    expectTypeOf<Budget['remaining_credits']>().toEqualTypeOf<number | null>();
    expectTypeOf<Budget['resets_at']>().toEqualTypeOf<string>();
    expectTypeOf<Budget['subjects']>().toEqualTypeOf<BudgetSubject[] | null>();
    expectTypeOf<BudgetSubject>().toEqualTypeOf<{ id: string; spent_credits: number; spent_ai_tokens: number }>();
    expectTypeOf<BudgetCreateInput['scope']>().toEqualTypeOf<Budget['scope']>();
    expectTypeOf<BudgetCreateInput['window']>().toEqualTypeOf<Budget['window']>();
    expectTypeOf<BudgetCreateInput>().toHaveProperty('limit_credits').toEqualTypeOf<number | null | undefined>();
    expectTypeOf<BudgetUpdateInput>().toHaveProperty('limit_credits').toEqualTypeOf<number | null | undefined>();
    expectTypeOf<BudgetUpdateInput>().toHaveProperty('window').toEqualTypeOf<Budget['window'] | undefined>();
    expectTypeOf<PaymentRequired['reason']>().toEqualTypeOf<'insufficient_credits' | 'budget_exceeded'>();
    expectTypeOf<PaymentRequired>().toHaveProperty('budget_id').toEqualTypeOf<string | undefined>();
    expectTypeOf<PaymentRequired>().toHaveProperty('resets_at').toEqualTypeOf<string | undefined>();
    expectTypeOf<StdioCheckResult>().toHaveProperty('payment_required').toEqualTypeOf<PaymentRequired | undefined>();
    expectTypeOf<RecordResult>().toHaveProperty('payment_required').toEqualTypeOf<PaymentRequired | undefined>();
    expectTypeOf<CreditgateClient['budgets']['list']>().returns.resolves.toEqualTypeOf<Budget[]>();
    expectTypeOf<CreditgateClient['budgets']['create']>().parameters.toEqualTypeOf<[string, BudgetCreateInput]>();
    expectTypeOf<CreditgateClient['budgets']['update']>().parameters.toEqualTypeOf<[string, string, BudgetUpdateInput]>();
    expectTypeOf<CreditgateClient['budgets']['delete']>().returns.resolves.toEqualTypeOf<Budget>();
    expectTypeOf<CreditgateError['budgetId']>().toEqualTypeOf<string | undefined>();
    expectTypeOf<CreditgateError['resetsAt']>().toEqualTypeOf<string | undefined>();
    expectTypeOf<CreditgateError['isBudgetExceeded']>().toEqualTypeOf<boolean>();
    expectTypeOf<BudgetRefusal>().toEqualTypeOf<{
      budgetId: string | undefined;
      resetsAt: string | undefined;
      creditsRequired: number | undefined;
      creditsAvailable: number | null | undefined;
    }>();
  });

  it('the client methods return those types; errors carry the documented fields', () => {
    expectTypeOf<CreditgateClient['stdio']['checkEntitlement']>().returns.resolves.toEqualTypeOf<StdioCheckResult>();
    expectTypeOf<CreditgateClient['stdio']['recordUsage']>().returns.resolves.toEqualTypeOf<WithReplay<RecordResult>>();
    expectTypeOf<CreditgateClient['service']['checkEntitlement']>().returns.resolves.toEqualTypeOf<ServiceCheckResult>();
    expectTypeOf<CreditgateClient['webhooks']['send']>().returns.resolves.toEqualTypeOf<WithReplay<WebhookSendResult>>();
    expectTypeOf<CreditgateClient['entitlements']['check']>().returns.resolves.toEqualTypeOf<EntitlementSnapshot>();
    expectTypeOf<CreditgateError['code']>().toEqualTypeOf<string>();
    expectTypeOf<CreditgateError['status']>().toEqualTypeOf<number | null>();
    expectTypeOf<CreditgateError['creditsRequired']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<CreditgateError['creditsAvailable']>().toEqualTypeOf<number | null | undefined>();
    expectTypeOf<CreditgateError['retryAfterSeconds']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<CreditgateError['shouldRetry']>().toEqualTypeOf<boolean | undefined>();
    expectTypeOf<CreditgateError['isTransient']>().toEqualTypeOf<boolean>();
  });
});
