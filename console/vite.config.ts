import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/**
 * The console (docs/console.md): built by `npm run build` into dist/console, which the service serves
 * at /console. Hashed file names under assets/ are cached for a year by the service.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  esbuild: { jsx: 'automatic' },
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
