/**
 * Addresses the console receives from answers and then follows: kept apart from React and the DOM so
 * they are unit-tested (links.unit.test.ts).
 */

/** An http(s) address, normalised, or null: a `javascript:` or other scheme is never followed or linked. */
export function webUrl(url: string | null | undefined): string | null {
  if (!url) return null;
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'https:' || parsed.protocol === 'http:' ? parsed.href : null;
  } catch {
    return null;
  }
}

/**
 * The `rel="next"` target of a `Link` header as a path and query on `origin`, or null when there is
 * none or it leaves the origin. It is resolved as the browser resolves it, so a "//host" or a
 * backslash path, which a browser reads as another host, is refused: the request would carry the
 * access token.
 */
export function sameOriginNext(header: string | null, origin: string): string | null {
  for (const part of header?.split(',') ?? []) {
    const m = /^\s*<([^>]*)>(.*)$/.exec(part);
    if (!m?.[1] || !/;\s*rel="?next"?(\s|;|$)/i.test(m[2] ?? '')) continue;
    const target = new URL(m[1], origin);
    return target.origin === origin ? `${target.pathname}${target.search}` : null;
  }
  return null;
}
