export * from './accounts.js';
export * from './audit.js';
export * from './credits.js';
export * from './deployments.js';
