/**
 * creditgate under test: the production start path (src/main.ts serve(): config from the
 * environment, database, migrations, app, workers), plus an IPC channel to the runner for seeding
 * tenants and checking the accounting (an in-memory PGlite is reachable only from this process).
 */
import type { AddressInfo } from 'node:net';
import { serve } from '../src/main.js';
import { seedTenants, verifyAccounting } from './fixtures.js';
import { serveParent } from './lib/child.js';

const app = await serve(process.env);
let tenants = 0;
serveParent((app.server.address() as AddressInfo).port, {
  seed: async (args) => {
    const { count, prefix } = args as { count: number; prefix?: string };
    const seeded = await seedTenants(app, count, prefix);
    tenants += seeded.many.length + 1;
    return seeded;
  },
  verify: () => verifyAccounting(app.deps.db, tenants),
});
