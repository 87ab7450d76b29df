/**
 * The console reads an error answer here and nowhere else. The API answers an error in one of three
 * shapes (docs/openapi.md, Shapes; docs/ai-proxy.md), which this reads into one ApiError:
 *   envelope  {success: false, error: {code, message}, details: {timestamp, fields?, …}}  the application API
 *   flat      {error: "word", code, message, fields?, …}                                 /api/v1 (the operator API)
 *   OpenAI    {error: {message, type, param, code, fields?}}                              the AI proxy
 * Anything else (a proxy's HTML page, an empty body) becomes HTTP_<status> with the status text.
 */

export interface FieldMessage {
  field: string;
  message: string;
}

/** An error answer of the API, with its machine-readable code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: FieldMessage[] = [],
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function fieldsOf(value: unknown): FieldMessage[] {
  if (!Array.isArray(value)) return [];
  return value.filter((f): f is FieldMessage => isObject(f) && typeof f.field === 'string' && typeof f.message === 'string');
}

/** The ApiError of an answer's status and its body, parsed (or null when it was not JSON). */
export function apiErrorOf(status: number, statusText: string, body: unknown): ApiError {
  const b = isObject(body) ? body : {};
  // The envelope and the OpenAI shape: the code and message inside `error`; fields in `details` or beside them.
  if (isObject(b.error)) {
    const e = b.error;
    const fields = fieldsOf(isObject(b.details) ? b.details.fields : undefined);
    return new ApiError(
      status,
      typeof e.code === 'string' ? e.code : 'ERROR',
      typeof e.message === 'string' ? e.message : statusText,
      fields.length > 0 ? fields : fieldsOf(e.fields),
    );
  }
  // The flat shape: `error` is a lower-case word, `code` the one to act on.
  if (typeof b.code === 'string') {
    return new ApiError(status, b.code, typeof b.message === 'string' ? b.message : statusText, fieldsOf(b.fields));
  }
  return new ApiError(status, `HTTP_${status}`, statusText || 'Request failed');
}

/** The ApiError of a response that is not ok. */
export async function errorOf(res: Response): Promise<ApiError> {
  let body: unknown = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: the status speaks
  }
  return apiErrorOf(res.status, res.statusText, body);
}
