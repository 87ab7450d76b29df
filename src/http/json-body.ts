import type { FastifyInstance } from 'fastify';
import { ValidationError } from '../errors.js';

/**
 * The JSON body parser (docs/input.md): Fastify's own (its empty-body, syntax and prototype-poisoning
 * checks), given the body's bytes checked as UTF-8 first. Read as a string, bytes that are not UTF-8
 * (an overlong NUL `C0 80`, a lone Latin-1 byte, an encoded surrogate) became U+FFFD and were stored
 * as such; they are a 400 naming `body`. A key `__proto__` (or `constructor.prototype`) is refused
 * with its own message rather than "not valid JSON", since the body is valid JSON.
 */
export function registerJsonBody(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(new ValidationError('The body is not valid UTF-8', [{ field: 'body', message: 'is not valid UTF-8' }]), undefined);
      return;
    }
    parse(request, text, (err, value) => {
      if (err && (err as { code?: string }).code === 'FST_ERR_CTP_INVALID_JSON_BODY' && isJson(text)) {
        done(new ValidationError('The body has a key named __proto__ or constructor.prototype, which is refused', [{ field: 'body', message: 'has a __proto__ or constructor.prototype key' }]), undefined);
        return;
      }
      done(err, value);
    });
  });
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
