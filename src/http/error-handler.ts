import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../clock.js';
import { isConnectionError, isTransientError } from '../db/client.js';
import { requestPath, usesFlatShape } from './route-prefixes.js';
import { type AjvError, fieldErrorsOf } from './validation-messages.js';
import {
  AppError,
  envelopeErrorBody,
  type FieldError,
  flatErrorBody,
  NotFoundError,
  OpenAiShapedError,
  openAiErrorBody,
  ServiceUnavailableError,
  upstreamDetailOf,
  ValidationError,
} from '../errors.js';

function fieldsOf(err: FastifyError): FieldError[] {
  const part = (err as { validationContext?: string }).validationContext ?? 'body';
  return fieldErrorsOf((err.validation ?? []) as AjvError[], part);
}

/** docs/input.md: a path id that must be a UUID and is not names nothing that exists, so it is 404 like a missing row (400 in a body or query). */
function isMalformedPathId(e: FastifyError): boolean {
  if ((e as { validationContext?: string }).validationContext !== 'params') return false;
  return ((e.validation ?? []) as AjvError[]).some((v) => v.keyword === 'format' && v.params?.format === 'uuid');
}

/**
 * Defence in depth behind http/input-guard.ts, which is the fix: input that slipped past it and made
 * the runtime or the database refuse a value is still the caller's fault, never a 500. The error
 * handler logs these at warn with the stack, so whatever let it through gets found and checked earlier.
 */
export class UncheckedInputError extends ValidationError {}

/**
 * SQLSTATEs that mean "this value cannot be stored or cast": 22P02 invalid text representation (a bad
 * uuid or integer), 22021 a NUL byte in text, 22P05 an untranslatable character (\u0000 or a lone
 * surrogate in jsonb), 22001 too long, 22003 out of range, 22007/22008 bad or overflowing datetime,
 * 22009 a time zone displacement out of range (how PGlite reads a year past 9999, `+010000-…`),
 * 54001 too complex (jsonb nested past the stack). Not the whole class 22: division by zero is ours.
 */
const INPUT_SQLSTATES = new Set(['22P02', '22021', '22P05', '22001', '22003', '22007', '22008', '22009', '54001']);

function uncheckedInputOf(err: unknown): UncheckedInputError | null {
  // A stack overflow (deep input walked recursively) or an invalid length/time value built from input.
  if (err instanceof RangeError) {
    return new UncheckedInputError('The request holds a value too large or too deeply nested to process', [
      { field: 'body', message: 'cannot be processed' },
    ]);
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (err instanceof Error && typeof code === 'string' && INPUT_SQLSTATES.has(code)) {
    // The database's own message names SQL and values: it never reaches the wire.
    return new UncheckedInputError('The request holds a value that cannot be stored', [{ field: 'body', message: 'cannot be stored' }]);
  }
  return null;
}

/** Turn anything thrown into an AppError; unknown errors become an opaque 500. */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  const e = err as FastifyError;
  if (e.validation && isMalformedPathId(e)) return new NotFoundError('Resource');
  if (e.validation) {
    const fields = fieldsOf(e);
    const first = fields[0];
    return first ? ValidationError.forField(first.field, first.message, fields) : new ValidationError('Invalid request', fields);
  }
  if (isConnectionError(err)) return new ServiceUnavailableError();
  if (isTransientError(err)) return new ServiceUnavailableError('The database did not finish the request in time; its transaction was rolled back. Retry later.');
  // Fastify's own body errors first: it builds some of them on RangeError, which the guard below takes for a value that slipped through.
  switch (e.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ValidationError('The request body is larger than 1 MiB', [{ field: 'body', message: 'is too large' }]);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ValidationError('The Content-Length header does not match the body', [{ field: 'content-length', message: 'does not match the body' }]);
  }
  const unchecked = uncheckedInputOf(err);
  if (unchecked) return unchecked;
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ValidationError('Send the body as application/json', [{ field: 'content-type', message: 'must be application/json' }]);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ValidationError('The JSON body is empty', [{ field: 'body', message: 'is empty' }]);
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ValidationError('The body is not valid JSON', [{ field: 'body', message: 'is not valid JSON' }]);
  }
  if (e instanceof SyntaxError || (e.statusCode === 400 && /JSON/i.test(e.message))) {
    return new ValidationError('The body is not valid JSON', [{ field: 'body', message: 'is not valid JSON' }]);
  }
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new ValidationError(e.message);
  }
  return new AppError('INTERNAL_ERROR', 'Internal error');
}

export function sendError(reply: FastifyReply, request: FastifyRequest, appError: AppError, clock: Clock): FastifyReply {
  for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value);
  const openAi =
    appError instanceof OpenAiShapedError ||
    (appError.code === 'VALIDATION_ERROR' && (request.routeOptions.config as { errorShape?: string } | undefined)?.errorShape === 'openai');
  const body = openAi ? openAiErrorBody(appError) : usesFlatShape(requestPath(request)) ? flatErrorBody(appError) : envelopeErrorBody(appError, clock.now());
  if (appError.code === 'INTERNAL_ERROR') {
    if (usesFlatShape(requestPath(request))) body.request_id = request.id;
    else (body.details as Record<string, unknown>).request_id = request.id;
  }
  // Error bodies are written here and nowhere else; they bypass the routes' success serializers.
  return reply.code(appError.status).type('application/json; charset=utf-8').serializer(JSON.stringify).send(body);
}

/** The one error handler (STYLE rule 5): both wire shapes come from errors.ts. */
export function registerErrorHandling(app: FastifyInstance, clock: Clock): void {
  app.setErrorHandler((err, request, reply) => {
    const appError = toAppError(err);
    if (appError.code === 'INTERNAL_ERROR') request.log.error({ err }, 'unhandled error');
    else if (appError instanceof UncheckedInputError) request.log.warn({ err }, 'input the input guard should have refused reached the runtime or the database');
    else if (appError.code === 'SERVICE_UNAVAILABLE') request.log.warn({ err }, 'database unavailable');
    else if (upstreamDetailOf(appError)) request.log.warn({ code: appError.code, upstream: upstreamDetailOf(appError) }, 'an upstream refused: its words are for the operator');
    return sendError(reply, request, appError, clock);
  });
  app.setNotFoundHandler((request, reply) => sendError(reply, request, new NotFoundError('Route'), clock));
}
