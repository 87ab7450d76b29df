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
const bodyAjv = addFormats(new Ajv({ ...common, coerceTypes: false }));
const partAjv = addFormats(new Ajv({ ...common, coerceTypes: 'array' }));

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : partAjv;
  return ajv.compile(schema as object) as ReturnType<FastifySchemaCompiler<unknown>>;
};
