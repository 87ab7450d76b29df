import type { CreditgateClient } from '../client.js';
import type { CreditCosts } from '../types.js';
import type { MeteringLogger } from './options.js';

/** Where the middleware puts a metered tool's price in its tools/list entry's `_meta` (docs/client.md, Prices in tools/list). */
export const META_PRICING = 'io.creditgate/pricing';

/** What `_meta["io.creditgate/pricing"]` holds: the credits one successful call deducts, and the action that sets them. */
export interface ToolPrice {
  credits: number;
  action: string;
}

/** A tool without a row in the tool → action map is metered as this action (docs/metering.md). */
export const DEFAULT_ACTION = 'platform_basic';
/** The price list is revalidated at most this often (a conditional GET: a 304 carries no body). */
export const PRICING_REVALIDATE_MS = 5 * 60_000;
/** How often the background timer looks whether a revalidation is due. */
export const PRICING_TICK_MS = 30_000;
/** How long a tools/list answer waits for the price list before it goes out with the prices known. */
const LISTING_WAIT_MS = 3_000;
/** After a failed first load (no prices known yet), the next listing may try again this soon. */
const FIRST_LOAD_RETRY_MS = 30_000;

interface Table {
  credits: Map<string, number>;
  actions: Map<string, string>;
}

function tableOf(costs: CreditCosts): Table {
  return {
    credits: new Map(costs.costs.map((c) => [c.action, c.credits])),
    actions: new Map((costs.tools ?? []).map((t) => [t.tool_name, t.action])),
  };
}

export interface PriceListDeps {
  client: CreditgateClient;
  now: () => number;
  logger: MeteringLogger;
  /** The names whose prices tools/list shows (the tools the Meter meters), in any order. */
  meteredTools: () => Iterable<string>;
  /** Prices shown to clients changed: tell every connected server's client (notifications/tools/list_changed). */
  changed: () => void;
}

/**
 * The platform's cost table as this process knows it, with its ETag: loaded on the first tools/list,
 * revalidated with If-None-Match at most every 5 minutes (on a listing, a tool call, or the
 * background timer), one request at a time. A change of a price that clients were shown calls
 * `changed`. An unreachable platform keeps the last prices (none before the first load).
 */
export class PriceList {
  private table: Table | undefined;
  private etag: string | undefined;
  /** When the last request was made (successful or not); -Infinity before the first. */
  private checkedAt = Number.NEGATIVE_INFINITY;
  private loading: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The prices clients were last shown (a tools/list answer or a list_changed), as a signature. */
  private shown: string | undefined;

  constructor(private readonly deps: PriceListDeps) {}

  /** The price of a tool, or undefined while no price list is known. */
  priceOf(toolName: string): ToolPrice | undefined {
    if (!this.table) return undefined;
    const action = this.table.actions.get(toolName) ?? DEFAULT_ACTION;
    const credits = this.table.credits.get(action);
    return credits === undefined ? undefined : { credits, action };
  }

  /** Prices for a tools/list answer: revalidated first when due; the background timer starts with the first listing. */
  async forListing(): Promise<(toolName: string) => ToolPrice | undefined> {
    this.startTimer();
    // A slow or unreachable platform does not hold the listing up: it goes out with the prices known
    // now, and a load that ends later and shows other prices sends notifications/tools/list_changed.
    let timer: NodeJS.Timeout | undefined;
    const patience = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, LISTING_WAIT_MS);
    });
    await Promise.race([this.refreshIfDue(), patience]);
    clearTimeout(timer);
    this.shown = this.signature();
    return (toolName) => this.priceOf(toolName);
  }

  /** Revalidates when 5 minutes have passed since the last request (sooner after a failed first load); never throws. */
  refreshIfDue(): Promise<void> {
    const wait = this.table || this.checkedAt === Number.NEGATIVE_INFINITY ? PRICING_REVALIDATE_MS : FIRST_LOAD_RETRY_MS;
    if (this.loading) return this.loading;
    if (this.deps.now() - this.checkedAt < wait) return Promise.resolve();
    this.loading = this.revalidate().finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  /** Whether a listing was served (so a revalidation has clients to tell). */
  get active(): boolean {
    return this.shown !== undefined;
  }

  private async revalidate(): Promise<void> {
    this.checkedAt = this.deps.now();
    try {
      const answer = await this.deps.client.creditCostsIfChanged(this.table ? this.etag : undefined);
      if (answer.notModified) return;
      this.table = tableOf(answer.costs);
      this.etag = answer.etag;
    } catch (err) {
      this.deps.logger.warn(`could not load the credit costs for tools/list (${(err as Error).message}); ${this.table ? 'keeping the last prices' : 'listing tools without prices'}`);
      return;
    }
    const now = this.signature();
    if (this.shown !== undefined && now !== this.shown) {
      this.shown = now;
      this.deps.changed();
    }
  }

  /** The metered tools' prices, in name order: equal signatures show clients equal prices. */
  private signature(): string {
    const names = [...new Set(this.deps.meteredTools())].sort();
    return JSON.stringify(names.map((name) => [name, this.priceOf(name) ?? null]));
  }

  private startTimer(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.refreshIfDue(), PRICING_TICK_MS);
    this.timer.unref();
  }

  /** Stops the background revalidation (Meter.close). */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
