/**
 * MCP middleware: meters every tool of an McpServer (`@modelcontextprotocol/sdk`) against creditgate.
 *
 * ```ts
 * const server = new McpServer({ name: 'my-server', version: '1.0.0' });
 * withMetering(server, { apiKey: process.env.CREDITGATE_API_KEY, baseUrl: process.env.CREDITGATE_URL });
 * server.registerTool('search', { inputSchema: { q: z.string() } }, async ({ q }) => ({ content: [...] }));
 * ```
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { CreditgateError } from '../errors.js';
import { Meter } from './meter.js';
import type { MeteringOptions } from './options.js';
import { META_PRICING } from './pricing.js';

export { Meter } from './meter.js';
export { IDEMPOTENCY_META_KEYS, type MeteringEvent, type MeteringLogger, type MeteringOptions, type ToolExtra } from './options.js';
export type { FlushReport } from './replay.js';
export { FileOutbox, MemoryOutbox, type Outbox, type OutboxEntry } from './outbox.js';
export { type DenialInfo, META_DENIAL, META_PAYMENT_REQUIRED, META_USAGE, type MeteringRefusal } from './results.js';
export { META_PRICING, PRICING_REVALIDATE_MS, type PriceList, type ToolPrice } from './pricing.js';

type AnyCallback = (...params: never[]) => CallToolResult | Promise<CallToolResult>;

/**
 * Meters every tool registered on `server` from now on (through registerTool, or the deprecated
 * tool()): check before the handler, record after a result without isError, release otherwise.
 * Call it before registering tools. Returns the Meter (flushOutbox, close).
 *
 * A hosted server that makes one McpServer per session should make one Meter with createMeter and
 * pass it here for each session: a Meter per session would each keep its own outbox and session cache.
 */
export function withMetering(server: McpServer, options: MeteringOptions | Meter): Meter {
  const meter = options instanceof Meter ? options : new Meter(options);
  // McpServer keeps its tools in a private map; reading its size only guards against a silent gap.
  const existing = Object.keys((server as unknown as { _registeredTools?: Record<string, unknown> })._registeredTools ?? {});
  if (existing.length > 0) {
    throw new CreditgateError({
      code: 'CONFIGURATION_ERROR',
      message: `withMetering(server) must be called before tools are registered; already registered: ${existing.join(', ')}`,
    });
  }
  const registerTool = server.registerTool.bind(server);
  const patchedRegister = (name: string, config: { outputSchema?: unknown }, callback: AnyCallback) =>
    registerTool(name, config as Parameters<typeof registerTool>[1], meter.wrap(name, callback, { outputSchema: config?.outputSchema !== undefined }) as never);
  (server as unknown as { registerTool: typeof patchedRegister }).registerTool = patchedRegister;

  const tool = server.tool.bind(server) as (...params: unknown[]) => ReturnType<McpServer['tool']>;
  (server as unknown as { tool: typeof tool }).tool = (...params: unknown[]) => {
    const name = params[0] as string;
    const callback = params[params.length - 1] as AnyCallback;
    return tool(...params.slice(0, -1), meter.wrap(name, callback));
  };
  withPricing(server, meter);
  return meter;
}

type RawHandler = (request: unknown, extra: unknown) => Promise<unknown>;
interface ToolsListResult {
  tools?: Array<{ name: string; _meta?: Record<string, unknown> }>;
}

/**
 * Shows the price of every tool `meter` meters in `server`'s tools/list, as
 * `_meta["io.creditgate/pricing"] = { credits, action }`, and sends notifications/tools/list_changed
 * when one changes (docs/client.md, Prices in tools/list). withMetering does this; call it yourself
 * with meteredTool. Other tools are listed as they are. Does nothing with `pricing: false`.
 */
export function withPricing(server: McpServer, meter: Meter): void {
  const prices = meter.prices;
  if (!prices) return;
  // McpServer installs its tools/list handler on the low-level Server when the first tool is
  // registered (or at construction with capabilities.tools); the handler map is private, so it is
  // wrapped where it lives, now and whenever it is set again.
  const low = server.server as unknown as { _requestHandlers?: unknown; setRequestHandler: (...params: unknown[]) => unknown };
  const handlers = low._requestHandlers;
  if (!(handlers instanceof Map)) {
    // Prices are a convenience: metering goes on without them rather than stopping the server.
    process.emitWarning('creditgate: this MCP SDK keeps its request handlers elsewhere; tools/list is sent without prices (pass pricing: false to silence this)', {
      code: 'CREDITGATE_PRICING_UNAVAILABLE',
    });
    return;
  }
  const ours = new WeakSet<RawHandler>();
  const wrapListing = () => {
    const listing = handlers.get('tools/list') as RawHandler | undefined;
    if (!listing || ours.has(listing)) return;
    const priced: RawHandler = async (request, extra) => {
      const result = (await listing(request, extra)) as ToolsListResult;
      const priceOf = await prices.forListing();
      if (!Array.isArray(result?.tools)) return result;
      return {
        ...result,
        tools: result.tools.map((tool) => {
          const price = meter.isMetered(tool.name) ? priceOf(tool.name) : undefined;
          return price ? { ...tool, _meta: { ...tool._meta, [META_PRICING]: price } } : tool;
        }),
      };
    };
    ours.add(priced);
    handlers.set('tools/list', priced);
  };
  wrapListing();
  const setRequestHandler = low.setRequestHandler.bind(low);
  low.setRequestHandler = (...params: unknown[]) => {
    const answer = setRequestHandler(...params);
    wrapListing();
    return answer;
  };
  meter.addServer(server);
}

/**
 * Explicit form: `server.registerTool('search', config, meteredTool(meter, 'search', handler))`.
 * The wrapper cannot see the tool's config, so denials carry their reason in `_meta` only; pass
 * `{ outputSchema: false }` when the tool declares none to get it in structuredContent too.
 */
export function meteredTool<H extends AnyCallback>(meter: Meter, toolName: string, handler: H, options: { outputSchema?: boolean } = {}): H {
  return meter.wrap(toolName, handler, { outputSchema: options.outputSchema ?? true });
}

/** A Meter to share between meteredTool calls. */
export function createMeter(options: MeteringOptions): Meter {
  return new Meter(options);
}
