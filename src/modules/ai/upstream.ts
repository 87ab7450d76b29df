import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { Config } from '../../config.js';
import type { Metrics } from '../../lib/metrics.js';

/**
 * The OpenAI-compatible upstream at AI_BASE_URL (docs/ai-proxy.md), through one bounded undici pool:
 * at most AI_MAX_CONNECTIONS sockets, kept alive between calls; headers and each stretch of a body must
 * come within AI_TIMEOUT_MS. Bytes are handed on as they arrive; nothing here buffers a stream.
 * Each call is counted in creditgate_upstream_requests_total{upstream="ai"} by its status (or fault).
 */
export class AiUpstream {
  private readonly pool: Pool;
  private readonly basePath: string;

  constructor(
    baseUrl: string,
    private readonly apiKey: string | undefined,
    private readonly timeoutMs: number,
    connections: number,
    private readonly metrics?: Metrics,
  ) {
    const url = new URL(baseUrl);
    this.basePath = url.pathname.replace(/\/$/, '');
    this.pool = new Pool(url.origin, { connections, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, keepAliveTimeout: 30_000 });
  }

  static fromConfig(config: Config, metrics?: Metrics): AiUpstream | null {
    return config.aiBaseUrl ? new AiUpstream(config.aiBaseUrl, config.aiApiKey, config.aiTimeoutMs, config.aiMaxConnections, metrics) : null;
  }

  /** POST a JSON body to `path` below the base URL (`/chat/completions`, `/embeddings`). */
  post(path: string, body: unknown, signal: AbortSignal): Promise<Dispatcher.ResponseData> {
    if (!this.metrics) return this.request(path, body, signal);
    return this.metrics.observeUpstream('ai', () => this.request(path, body, signal), (res) => res.statusCode, signal);
  }

  private request(path: string, body: unknown, signal: AbortSignal): Promise<Dispatcher.ResponseData> {
    return this.pool.request({
      method: 'POST',
      path: `${this.basePath}${path}`,
      headers: this.headers({ 'content-type': 'application/json', accept: 'application/json, text/event-stream' }),
      body: JSON.stringify(body),
      signal,
      headersTimeout: this.timeoutMs,
      bodyTimeout: this.timeoutMs,
    });
  }

  private headers(extra: Record<string, string>): Record<string, string> {
    // The caller's credentials are ours to check, never the provider's to see: only AI_API_KEY goes upstream.
    return this.apiKey ? { ...extra, authorization: `Bearer ${this.apiKey}` } : extra;
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/**
 * Read a response body whole, up to `limit` bytes. Past the limit: null, or with `truncate` the first
 * `limit` bytes (an error body is handed on cut short rather than not at all).
 */
export async function readBody(body: Dispatcher.ResponseData['body'], limit: number, truncate = false): Promise<Buffer | null> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    if (size + buf.length > limit) {
      body.destroy();
      if (!truncate) return null;
      parts.push(buf.subarray(0, limit - size));
      size = limit;
      break;
    }
    parts.push(buf);
    size += buf.length;
  }
  return Buffer.concat(parts, size);
}
