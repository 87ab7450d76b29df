/**
 * Request and answer types of every route the client calls, taken from the service's OpenAPI
 * document (generated/openapi.ts, written by `npm run generate:client`), never retyped by hand.
 */
import type { components, paths } from './generated/openapi.js';

type Method = 'get' | 'post' | 'put' | 'delete';
type Json<T> = T extends { content: { 'application/json': infer B } } ? B : never;
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;

/** JSON body a route takes. */
export type RequestBody<P extends keyof paths, M extends Method> = Operation<P, M> extends { requestBody?: infer R } ? Json<NonNullable<R>> : never;
/** JSON a route answers with on success (200, or 201 for a create). */
export type Reply<P extends keyof paths, M extends Method> = Operation<P, M> extends { responses: { 200: infer R } }
  ? Json<R>
  : Operation<P, M> extends { responses: { 201: infer R } }
    ? Json<R>
    : never;
/** Query parameters of a route. */
export type Query<P extends keyof paths, M extends Method> = Operation<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;
/** The `data` of an application API answer (the envelope `{success, data, message}`, docs/openapi.md). */
type Data<R> = R extends { data: infer D } ? D : never;

export type StdioCheckInput = RequestBody<'/api/v1/mcp/stdio/check-entitlement', 'post'>;
export type StdioCheckResult = Reply<'/api/v1/mcp/stdio/check-entitlement', 'post'>;
export type StdioRecordInput = RequestBody<'/api/v1/mcp/stdio/record-usage', 'post'>;
export type RecordResult = Reply<'/api/v1/mcp/stdio/record-usage', 'post'>;

export type ResolveResult = Reply<'/api/v1/mcp/resolve-deployment', 'get'>;
export type ServiceCheckInput = RequestBody<'/api/v1/mcp/check-entitlement', 'post'>;
export type ServiceCheckResult = Reply<'/api/v1/mcp/check-entitlement', 'post'>;
export type ServiceUsageInput = RequestBody<'/api/v1/mcp/usage', 'post'>;
export type ServiceUsageResult = Reply<'/api/v1/mcp/usage', 'post'>;
export type CreditCosts = Reply<'/api/v1/mcp/credit-costs', 'get'>;
export type CreditCost = CreditCosts['costs'][number];
/** A row of the tool → action map; a tool without one is priced as `platform_basic`. */
export type ToolAction = CreditCosts['tools'][number];

export type ReleaseResult = Reply<'/api/v1/mcp/reservations/{invocation_id}/release', 'post'>;
export type InvocationStatus = Reply<'/api/v1/mcp/invocations/{invocation_id}', 'get'>;
export type RefundInput = RequestBody<'/api/v1/mcp/usage/{usage_id}/refund', 'post'>;
export type RefundResult = Reply<'/api/v1/mcp/usage/{usage_id}/refund', 'post'>;

export type EntitlementSnapshot = Reply<'/api/v1/entitlements/check', 'post'>;
export type AiQuota = Reply<'/api/v1/ai/quota', 'get'>;

export type WebhookSendInput = RequestBody<'/api/v1/proxy/webhooks/send', 'post'>;
export type WebhookSendResult = Reply<'/api/v1/proxy/webhooks/send', 'post'>;
export type WebhookQuota = Reply<'/api/v1/proxy/webhooks/quota', 'get'>;
export type WebhookDeliveriesQuery = Query<'/api/v1/proxy/webhooks/deliveries', 'get'>;
export type WebhookDeliveries = Reply<'/api/v1/proxy/webhooks/deliveries', 'get'>;
export type WebhookDelivery = Reply<'/api/v1/proxy/webhooks/deliveries/{webhookId}', 'get'>;

export type DenialReason = NonNullable<StdioCheckResult['reason']>;

/** A check's or record's refusal for money: `insufficient_credits`, or `budget_exceeded` with the budget and when its window resets. */
export type PaymentRequired = components['schemas']['PaymentRequired'];

/** An organization's budget with its window in progress (docs/budgets.md, API). */
export type Budget = Data<Reply<'/organizations/{id}/budgets/{budgetId}', 'get'>>;
export type BudgetSubject = NonNullable<Budget['subjects']>[number];
export type BudgetCreateInput = RequestBody<'/organizations/{id}/budgets', 'post'>;
export type BudgetUpdateInput = RequestBody<'/organizations/{id}/budgets/{budgetId}', 'put'>;

/** An organization's auto top-up setting (docs/billing.md, "Auto top-up"); never set, it is off with nulls. */
export type AutoTopUp = Data<Reply<'/organizations/{id}/auto-top-up', 'get'>>;
/** The whole setting a PUT takes: every field required. */
export type AutoTopUpInput = RequestBody<'/organizations/{id}/auto-top-up', 'put'>;
