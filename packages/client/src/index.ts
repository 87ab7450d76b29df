export { type CacheOptions, type ClientOptions, type Credentials, CreditgateClient, type CreditCostsRevalidation, createClient, type ReadOptions, type WithReplay } from './client.js';
export { type BudgetRefusal, budgetRefusal, type ClientErrorCode, CreditgateError, type CreditgateErrorInit, isCreditgateError } from './errors.js';
export type { TransportOptions } from './http.js';
export type * from './types.js';
export type { components, paths } from './generated/openapi.js';
