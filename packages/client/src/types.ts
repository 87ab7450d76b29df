/**
 * Request and answer types of every route the client calls, taken from the service's OpenAPI
 * document (generated/openapi.ts, written by `npm run generate:client`), never retyped by hand.
 */
import type { paths } from './generated/openapi.js';

type Json<T> = T extends { content: { 'application/json': infer B } } ? B : never;
type Operation<P extends keyof paths, M extends 'get' | 'post'> = NonNullable<paths[P][M]>;

/** JSON body a route takes. */
export type RequestBody<P extends keyof paths, M extends 'get' | 'post'> = Operation<P, M> extends { requestBody?: infer R }
  ? Json<NonNullable<R>>
  : never;
/** JSON a route answers with on success. */
export type Reply<P extends keyof paths, M extends 'get' | 'post'> = Operation<P, M> extends { responses: { 200: infer R } }
  ? Json<R>
  : never;
/** Query parameters of a route. */
export type Query<P extends keyof paths, M extends 'get' | 'post'> = Operation<P, M> extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;

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
