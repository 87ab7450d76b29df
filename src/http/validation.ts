import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

const common: Options = { allErrors: false, useDefaults: true, strict: false, removeAdditional: false };

/**
 * Bodies are validated as sent: no type coercion ("5" is not 5) and no silent removal of unknown
 * fields (docs/input.md: they are rejected). Query strings, params and headers arrive as strings, so they coerce.
 */
const bodyAjv = instantsOnly(addFormats(new Ajv({ ...common, coerceTypes: false })));
const partAjv = instantsOnly(addFormats(new Ajv({ ...common, coerceTypes: 'array' })));

/**
 * `date-time` as ajv-formats reads RFC 3339, and also an instant JavaScript can hold (docs/input.md,
 * Dates): RFC 3339 allows a leap second (`23:59:60`), which `new Date` cannot read, and an Invalid
 * Date then passes every later comparison.
 */
function instantsOnly(ajv: Ajv): Ajv {
  const rfc3339 = ajv.formats['date-time'] as { validate: (s: string) => boolean };
  ajv.addFormat('date-time', { type: 'string', validate: (s: string) => rfc3339.validate(s) && !Number.isNaN(Date.parse(s)) });
  return ajv;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : partAjv;
  return ajv.compile(schema as object) as ReturnType<FastifySchemaCompiler<unknown>>;
};
