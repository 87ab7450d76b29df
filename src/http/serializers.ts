import { createHash } from 'node:crypto';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

/**
 * Fastify's response serializers (fast-json-stringify), each built once per process and schema.
 * Building them is most of the time it takes to make an app (about 0.2 s of 0.35 s, for every route's
 * response schemas), and the same again for every app a process makes of the same routes, as the
 * tests do, one app per test file (CONTRIBUTING.md, Fixtures). A serializer is a function of its
 * schema's JSON, the shared schemas and the serializer options alone (fast-json-stringify reads
 * nothing else of them), so one made for the same three serves another app as it is. Many route
 * schemas are made while their routes are registered, new objects for each app, so they are known by
 * a hash of their JSON; the shared schemas and options by their JSON, read once per app.
 */
type Factory = ReturnType<typeof SerializerSelector>;
type Compiler = ReturnType<Factory>;
type Serializer = ReturnType<Compiler>;

const build: Factory = SerializerSelector();
const made = new Map<string, Map<string, Serializer>>();

export const buildSerializer: Factory = (externalSchemas, serializerOpts) => {
  const compile = build(externalSchemas, serializerOpts);
  const context = JSON.stringify([externalSchemas ?? null, serializerOpts ?? null]);
  let cache = made.get(context);
  if (!cache) {
    cache = new Map();
    made.set(context, cache);
  }
  const serializers = cache;
  return (route) => {
    // Kept apart by status and content type, as Fastify asks for them.
    const key = createHash('sha256')
      .update(`${route.httpStatus ?? ''}\u0000${(route as { contentType?: string }).contentType ?? ''}\u0000${JSON.stringify(route.schema ?? null)}`)
      .digest('base64');
    let serializer = serializers.get(key);
    if (!serializer) {
      serializer = compile(route);
      serializers.set(key, serializer);
    }
    return serializer;
  };
};
