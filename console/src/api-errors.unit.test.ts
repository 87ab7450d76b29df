import { describe, expect, it } from 'vitest';
import { AppError, ERROR_STATUS, type ErrorCode, envelopeErrorBody, flatErrorBody, OpenAiShapedError, openAiErrorBody, ValidationError } from '../../src/errors';
import { ApiError, apiErrorOf, describeError, ERROR_MESSAGES, errorOf, messageOf, UNREACHABLE_MESSAGE } from './api-errors';

// The bodies come from the server's own builders (src/errors.ts), so this reads what the API really sends.
const NOW = new Date('2026-01-01T00:00:00Z');
const invalid = ValidationError.forField('tier', 'must be one of sandbox, trial');

describe('the console reads every error shape of the API', () => {
  it('the envelope of the application API', () => {
    const e = apiErrorOf(400, 'Bad Request', envelopeErrorBody(invalid, NOW));
    expect(e).toBeInstanceOf(ApiError);
    expect([e.status, e.code, e.message, e.fields]).toEqual([400, 'VALIDATION_ERROR', 'tier must be one of sandbox, trial', [{ field: 'tier', message: 'must be one of sandbox, trial' }]]);
    const conflict = apiErrorOf(409, 'Conflict', envelopeErrorBody(new AppError('CONFLICT', 'Already a member'), NOW));
    expect([conflict.code, conflict.message, conflict.fields]).toEqual(['CONFLICT', 'Already a member', []]);
  });

  it('the flat shape of /api/v1 (the operator API)', () => {
    const e = apiErrorOf(400, 'Bad Request', flatErrorBody(invalid));
    expect([e.status, e.code, e.message, e.fields]).toEqual([400, 'INVALID_REQUEST', 'tier must be one of sandbox, trial', [{ field: 'tier', message: 'must be one of sandbox, trial' }]]);
    const limited = apiErrorOf(429, 'Too Many Requests', flatErrorBody(new AppError('RATE_LIMITED', 'Retry in 3 seconds.')));
    expect([limited.code, limited.message]).toEqual(['RATE_LIMITED', 'Retry in 3 seconds.']);
  });

  it('the OpenAI shape of the AI proxy', () => {
    const e = apiErrorOf(400, 'Bad Request', openAiErrorBody(invalid));
    expect([e.code, e.message, e.fields]).toEqual(['INVALID_REQUEST', 'tier must be one of sandbox, trial', [{ field: 'tier', message: 'must be one of sandbox, trial' }]]);
    const missing = apiErrorOf(404, 'Not Found', openAiErrorBody(new OpenAiShapedError('NOT_FOUND', 'No such model', 'model_not_found')));
    expect([missing.code, missing.message]).toEqual(['model_not_found', 'No such model']);
  });

  it('anything else by its status', async () => {
    expect([apiErrorOf(502, 'Bad Gateway', null).code, apiErrorOf(502, 'Bad Gateway', null).message]).toEqual(['HTTP_502', 'Bad Gateway']);
    expect(apiErrorOf(500, '', 'oops').message).toBe('Request failed');
    const html = await errorOf(new Response('<html>proxy</html>', { status: 503, statusText: 'Service Unavailable' }));
    expect([html.status, html.code, html.message]).toEqual([503, 'HTTP_503', 'Service Unavailable']);
    const json = await errorOf(new Response(JSON.stringify(envelopeErrorBody(new AppError('NOT_FOUND', 'Invitation not found'), NOW)), { status: 404 }));
    expect([json.code, json.message]).toEqual(['NOT_FOUND', 'Invitation not found']);
  });
});

/** An UPPER_SNAKE word: what a code looks like. No sentence a person reads may hold one. */
const CODE_LIKE = /\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/;
const CODES = Object.keys(ERROR_STATUS) as ErrorCode[];

describe('every error code of the service reads as a sentence', () => {
  it('has a message for every code in the service\'s list (a new code without one fails here)', () => {
    expect(CODES.filter((code) => !ERROR_MESSAGES[code])).toEqual([]);
    // And no message for a code the service no longer has.
    expect(Object.keys(ERROR_MESSAGES).filter((code) => !(code in ERROR_STATUS))).toEqual([]);
    for (const code of CODES) {
      expect(ERROR_MESSAGES[code], code).toMatch(/^[A-Z].*\.$/);
      expect(ERROR_MESSAGES[code], code).not.toMatch(CODE_LIKE);
    }
  });

  it('every code in every shape the console reads gets its sentence, never the code', () => {
    for (const code of CODES) {
      const err = new AppError(code, 'the service says why');
      for (const body of [envelopeErrorBody(err, NOW), flatErrorBody(err), openAiErrorBody(err)]) {
        const read = apiErrorOf(ERROR_STATUS[code], '', body);
        const text = messageOf(read);
        expect(text, `${code}: ${text}`).not.toMatch(CODE_LIKE);
        expect(Object.values(ERROR_MESSAGES), `${code} read as ${read.code}`).toContain(describeError(read).summary);
      }
    }
  });

  it("adds the service's own words where they say more, and keeps codes and internals out", () => {
    const refused = apiErrorOf(403, 'Forbidden', envelopeErrorBody(new AppError('FORBIDDEN', 'Your role (viewer) does not allow members.invite'), NOW));
    expect(describeError(refused)).toEqual({ summary: ERROR_MESSAGES.FORBIDDEN, detail: 'Your role (viewer) does not allow members.invite.', reference: null });
    expect(messageOf(refused)).toBe('You do not have permission to do that. Your role (viewer) does not allow members.invite.');

    // A message that quotes a code is left out: the sentence stands alone.
    const quoting = apiErrorOf(503, '', envelopeErrorBody(new AppError('BILLING_NOT_CONFIGURED', 'BILLING_NOT_CONFIGURED: set STRIPE_SECRET_KEY'), NOW));
    expect(messageOf(quoting)).toBe(ERROR_MESSAGES.BILLING_NOT_CONFIGURED);

    // An internal error says nothing of the inside, and gives the request id to quote.
    const body = envelopeErrorBody(new AppError('INTERNAL_ERROR', 'Internal error'), NOW);
    (body.details as Record<string, unknown>).request_id = 'req-42';
    expect(describeError(apiErrorOf(500, 'Internal Server Error', body))).toEqual({ summary: ERROR_MESSAGES.INTERNAL_ERROR, detail: null, reference: 'req-42' });
  });

  it('an answer that is not the service\'s, an unknown code, and no answer at all', () => {
    expect(messageOf(apiErrorOf(502, 'Bad Gateway', null))).toBe('The service is not reachable right now. Try again in a moment.');
    expect(messageOf(apiErrorOf(404, 'Not Found', openAiErrorBody(new OpenAiShapedError('NOT_FOUND', 'No such model', 'model_not_found'))))).toBe(
      `${ERROR_MESSAGES.NOT_FOUND} No such model.`,
    );
    expect(messageOf(new ApiError(418, 'SOMETHING_NEW', ''))).not.toMatch(CODE_LIKE);
    expect(messageOf(new TypeError('Failed to fetch'))).toBe(UNREACHABLE_MESSAGE);
    expect(messageOf(new Error('Choose at least one scope.'))).toBe('Choose at least one scope.');
  });
});
