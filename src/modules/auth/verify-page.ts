import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

/**
 * The page the verification mail links to (`PUBLIC_BASE_URL/verify-email#token=…`). The token rides in
 * the fragment, which browsers never send, so it reaches no server or proxy log; this page's script
 * reads it, removes it from the address bar and posts it to POST /auth/verify-email. A strict CSP
 * allows exactly this script (by hash) and requests to this origin only.
 */
const SCRIPT = `(async () => {
  const status = document.getElementById('status');
  const token = new URLSearchParams(location.hash.slice(1)).get('token');
  history.replaceState(null, '', location.pathname);
  if (!token) { status.textContent = 'This link has no token: open the link from the mail again.'; return; }
  try {
    const res = await fetch('/auth/verify-email', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
    const body = await res.json().catch(() => null);
    status.textContent = res.ok ? 'Your email address is verified. You can close this page.' : (body && body.error && body.error.message) || 'The link could not be used.';
  } catch { status.textContent = 'creditgate could not be reached; try the link again later.'; }
})();`;

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Verify your email address · creditgate</title></head>
<body><main><h1>Verifying your email address</h1><p id="status">One moment…</p></main>
<script>${SCRIPT}</script></body></html>
`;

export const VERIFY_PAGE_CSP = `default-src 'none'; script-src 'sha256-${createHash('sha256').update(SCRIPT).digest('base64')}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;

export async function verifyPageRoute(app: FastifyInstance): Promise<void> {
  // An HTML page for people, not an API operation: left out of the OpenAPI document.
  app.get('/verify-email', { schema: { hide: true } }, async (_request, reply) =>
    reply
      .type('text/html; charset=utf-8')
      .header('content-security-policy', VERIFY_PAGE_CSP)
      .header('cache-control', 'no-store')
      .header('referrer-policy', 'no-referrer')
      .header('x-content-type-options', 'nosniff')
      .send(PAGE),
  );
}
