import v8 from 'node:v8';

/**
 * The V8 settings the service runs with (docs/operations-memory.md, "V8's heap"). `npm start` and the
 * Dockerfile give them on `node`'s command line; `creditgate serve` started any other way (`npx
 * creditgate serve`, the installed bin, `node dist/cli.js serve`) sets those the command line did not
 * give before the service starts. V8 reads the heap growing setting at every full collection, so set
 * at start it works as on the command line (docs/operations-memory.md). Kept equal to the start
 * script's flags by test/serve-node-flags.unit.test.ts.
 */
export const SERVE_V8_FLAGS: readonly string[] = ['--heap-growing-percent=50'];

const nameOf = (flag: string) => flag.split('=')[0]!.replace(/_/g, '-');

/**
 * Set each of SERVE_V8_FLAGS that `execArgv` does not name (an operator's own value on the command
 * line wins). Returns the flags set here.
 */
export function applyServeV8Flags(execArgv: readonly string[] = process.execArgv, set: (flag: string) => void = v8.setFlagsFromString): string[] {
  const given = new Set(execArgv.map(nameOf));
  const missing = SERVE_V8_FLAGS.filter((flag) => !given.has(nameOf(flag)));
  for (const flag of missing) set(flag);
  if (set === v8.setFlagsFromString) setHere.push(...missing);
  return missing;
}

const setHere: string[] = [];

/** The flags this process set at start (applyServeV8Flags), for the service's start line. */
export function v8FlagsSetAtStart(): readonly string[] {
  return setHere;
}
