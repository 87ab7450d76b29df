// Where a start's time goes (bench/start.ts runs this with plain node, on the build, against the
// database in DATABASE_URL): each phase of src/main.ts's serve() in turn, as JSON milliseconds.
const phases = {};
let last = performance.now();
const mark = (name) => {
  const now = performance.now();
  phases[name] = Math.round(now - last);
  last = now;
};
phases['node until this line'] = Math.round(performance.now());
const dist = new URL('../../dist/', import.meta.url);
const { loadConfig } = await import(new URL('config.js', dist).href);
const { openDatabase } = await import(new URL('db/client.js', dist).href);
const { runMigrations } = await import(new URL('db/migrate.js', dist).href);
const { buildApp } = await import(new URL('app.js', dist).href);
const { systemClock } = await import(new URL('clock.js', dist).href);
await import(new URL('workers/catalog.js', dist).href);
mark('import the modules');
const { config } = loadConfig(process.env);
const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: config.databasePoolSize });
await runMigrations(db);
mark('open the database, migrations (none pending)');
const app = await buildApp({ config, db, clock: systemClock });
mark('buildApp (plugins, routes)');
await app.listen({ port: 0, host: '127.0.0.1' });
mark('listen (ready: compile route schemas)');
await app.inject({ url: '/readyz' });
mark('first /readyz');
await app.close();
await db.close();
process.stdout.write(`${JSON.stringify(phases)}\n`);
