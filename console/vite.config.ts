import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { defineConfig, type Plugin } from 'vite';

/** The built files the service sends compressed (docs/console.md "Files and caching"). */
const COMPRESSIBLE = /\.(js|css|html|svg|json|txt)$/;

/**
 * After the build, a `.br` (brotli, quality 11) and a `.gz` (gzip, level 9) beside every text file of
 * dist/console, which the service sends by the request's Accept-Encoding (@fastify/static's
 * `preCompressed`). A compressed copy no smaller than its file is not written: the file goes as it is.
 */
export function precompress(): Plugin {
  let outDir = '';
  return {
    name: 'creditgate-precompress',
    apply: 'build',
    configResolved(config) {
      outDir = config.build.outDir;
    },
    closeBundle() {
      const walk = (dir: string): string[] =>
        readdirSync(dir).flatMap((name) => {
          const path = join(dir, name);
          return statSync(path).isDirectory() ? walk(path) : [path];
        });
      for (const file of walk(outDir).filter((f) => COMPRESSIBLE.test(f))) {
        const raw = readFileSync(file);
        const br = brotliCompressSync(raw, {
          params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT, [constants.BROTLI_PARAM_SIZE_HINT]: raw.length },
        });
        const gz = gzipSync(raw, { level: 9 });
        if (br.length < raw.length) writeFileSync(`${file}.br`, br);
        if (gz.length < raw.length) writeFileSync(`${file}.gz`, gz);
      }
    },
  };
}

/**
 * The console (docs/console.md): built by `npm run build` into dist/console, which the service serves
 * at /console. Hashed file names under assets/ are cached for a year by the service.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  esbuild: { jsx: 'automatic' },
  plugins: [precompress()],
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    // `npm run console:dev`: the page from vite, every API call to the service on :8080 (npm start).
    proxy: Object.fromEntries(
      ['/auth', '/organizations', '/invitations', '/billing', '/templates', '/api', '/console/session'].map((p) => [p, 'http://127.0.0.1:8080']),
    ),
  },
});
