import { createRequire } from 'node:module';
import { type FastifyBaseLogger, type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import type { Bindings, ChildLoggerOptions, Logger } from 'pino';
import type { SecretRoutes } from './log-redaction.js';

// pino-pretty (31 modules) is loaded only in pretty mode: a production start never pays for it.
const require = createRequire(import.meta.url);

/**
 * How log lines are written (LOG_FORMAT, config.ts): `json` for machines (production, pipes, files),
 * `pretty` for a person at a terminal: one line per request, no pid or hostname.
 */
export type LogFormat = 'json' | 'pretty';

/** Something pino writes its lines to. */
export interface LogSink {
  write(line: string): unknown;
}

/**
 * The logger's `stream`: JSON lines to `stream` (stdout when none), or, in pretty mode, each line
 * formatted by pino-pretty in-process, synchronously, before it is written, so a crash loses
 * nothing and a test reads what it logged at once. Redaction and serializers ran before either.
 */
export function logDestination(format: LogFormat, stream?: NodeJS.WritableStream): { stream?: LogSink } {
  if (format === 'json') return stream ? { stream } : {};
  const out = stream ?? process.stdout;
  const { prettyFactory } = require('pino-pretty') as typeof import('pino-pretty');
  const pretty = prettyFactory({
    colorize: stream === undefined && process.stdout.isTTY === true && !process.env.NO_COLOR,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,reqId',
    // The request id ties a request's line to the error lines it caused.
    messageFormat: (log, key, _level, { colors }) =>
      log.reqId === undefined ? String(log[key]) : `${colors.gray(String(log.reqId))} ${String(log[key])}`,
  });
  return { stream: { write: (line: string) => out.write(pretty(line)) } };
}

/**
 * Pretty mode's request logging: one line per request instead of Fastify's two ("incoming request",
 * "request completed"), written when the answer is sent: `GET /invitations/[redacted] 200 3.1 ms`.
 * The URL is the redacted one every log line shows (log-redaction.ts).
 */
export class OneLinePerRequest extends LogController {
  constructor(private readonly secrets: SecretRoutes) {
    super();
  }

  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = `${request.method} ${this.secrets.redactUrl(request.url)} ${reply.statusCode} ${reply.elapsedTime.toFixed(1)} ms`;
    if (error) reply.log.error({ err: error }, line);
    else reply.log.info(line);
  }
}

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * Fastify's `childLoggerFactory`: each request's logger (`request.log`) is made when it first logs a
 * line at an enabled level, not for every request. pino's child applies the redaction paths to its
 * bindings as it is made (about 5 % of the server's CPU on a cached check at a `warn` level, where
 * no request logs anything; docs/benchmarks.md). A route with its own level or serializers gets its
 * child at once, as before.
 */
export function lazyChildLoggerFactory(this: unknown, logger: FastifyBaseLogger, bindings: Bindings, opts: ChildLoggerOptions): FastifyBaseLogger {
  if (Object.keys(opts).length > 0) return logger.child(bindings, opts);
  return new LazyChild(logger, bindings, opts) as unknown as FastifyBaseLogger;
}

/** The lazy request logger: its methods live on the prototype, so a request that logs nothing allocates one small object. */
class LazyChild {
  private real: FastifyBaseLogger | undefined;
  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly opts: ChildLoggerOptions,
  ) {}
  private made(): FastifyBaseLogger {
    this.real ??= this.parent.child(this.bindings, this.opts);
    return this.real;
  }
  private write(level: Level, args: unknown[]): void {
    if (this.real === undefined && !(this.parent as Logger).isLevelEnabled(level)) return;
    (this.made()[level] as (...a: unknown[]) => void)(...args);
  }
  get level(): string {
    return this.real?.level ?? this.parent.level;
  }
  set level(level: string) {
    this.made().level = level;
  }
  isLevelEnabled(level: string): boolean {
    return ((this.real ?? this.parent) as Logger).isLevelEnabled(level);
  }
  child(bindings: Bindings, opts?: ChildLoggerOptions): FastifyBaseLogger {
    return this.made().child(bindings, opts);
  }
  silent(): void {}
  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }
  error(...args: unknown[]): void {
    this.write('error', args);
  }
  warn(...args: unknown[]): void {
    this.write('warn', args);
  }
  info(...args: unknown[]): void {
    this.write('info', args);
  }
  debug(...args: unknown[]): void {
    this.write('debug', args);
  }
  trace(...args: unknown[]): void {
    this.write('trace', args);
  }
}
