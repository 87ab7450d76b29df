/**
 * The API's shapes as the console sees them: the types generated from /openapi.json for the SDK
 * (`npm run generate:client`, packages/client/src/generated/openapi.ts), so a change of a route's
 * schema that the console does not follow fails `npm run typecheck` instead of a page at run time.
 * `paths` are the routes of that file, which api.ts's typed client (`api`, `client`) calls.
 */
import type { components, paths } from './generated/openapi';

export type Schemas = components['schemas'];
export type { paths };
