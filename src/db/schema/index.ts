export * from './accounts.js';
export * from './audit.js';
export * from './credits.js';
export * from './deployments.js';
export * from './auth.js';
export * from './billing.js';
export * from './events.js';
export * from './templates.js';
