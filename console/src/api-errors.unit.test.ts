import { describe, expect, it } from 'vitest';
import { AppError, envelopeErrorBody, flatErrorBody, OpenAiShapedError, openAiErrorBody, ValidationError } from '../../src/errors';
import { ApiError, apiErrorOf, errorOf } from './api-errors';

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
