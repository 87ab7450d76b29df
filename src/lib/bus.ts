import { Redis } from 'ioredis';

/**
 * Cache invalidation across instances. With REDIS_URL the message goes through Redis pub/sub to every
 * instance (this one included); without it, only to this process. Messages are hints to drop cached
 * answers, never state: a lost message only means a cache lives until its TTL. The channels carry
 * REDIS_PREFIX, as every Redis key does: installations that share one Redis never hear each other
 * (README, REDIS_PREFIX).
 */
export interface Bus {
  publish(channel: BusChannel, message?: string): void;
  subscribe(channel: BusChannel, handler: (message: string) => void): void;
  /** Null when the bus has no backing service (in-process); else whether it answers. */
  ping(): Promise<boolean | null>;
  close(): Promise<void>;
}

export type BusChannel = 'resolve-cache' | 'cost-cache' | 'terms-cache' | 'plan-cache' | 'principal-cache' | 'balance-cache';

export class LocalBus implements Bus {
  private readonly handlers = new Map<string, Array<(message: string) => void>>();
  publish(channel: BusChannel, message = ''): void {
    for (const handler of this.handlers.get(channel) ?? []) handler(message);
  }
  subscribe(channel: BusChannel, handler: (message: string) => void): void {
    const list = this.handlers.get(channel) ?? [];
    list.push(handler);
    this.handlers.set(channel, list);
  }
  async ping(): Promise<boolean | null> {
    return null;
  }
  async close(): Promise<void> {}
}

export class RedisBus implements Bus {
  private readonly local = new LocalBus();
  private readonly pub: Redis;
  private readonly sub: Redis;

  constructor(
    url: string,
    /** Channel prefix (REDIS_PREFIX + 'bus:'): the instances of one installation share it, other installations do not. */
    private readonly prefix: string,
    onError: (err: Error) => void,
  ) {
    const options = { lazyConnect: false, maxRetriesPerRequest: 1, enableOfflineQueue: false };
    this.pub = new Redis(url, options);
    this.sub = new Redis(url, { ...options, enableOfflineQueue: true });
    this.pub.on('error', onError);
    this.sub.on('error', onError);
    this.sub.on('message', (channel: string, message: string) => {
      if (!channel.startsWith(this.prefix)) return;
      this.local.publish(channel.slice(this.prefix.length) as BusChannel, message);
    });
    // While not subscribed, messages are lost; so whenever the subscriber (re)connects, drop what
    // this instance cached meanwhile (ioredis resubscribes by itself on reconnect).
    this.sub.on('ready', () => this.resync());
  }

  private readonly channels = new Set<BusChannel>();

  private resync(): void {
    for (const channel of this.channels) this.local.publish(channel, 'resync');
  }

  publish(channel: BusChannel, message = ''): void {
    // Our own instance acts at once; the others hear it through Redis.
    this.local.publish(channel, message);
    this.pub.publish(this.prefix + channel, message).catch(() => {});
  }

  subscribe(channel: BusChannel, handler: (message: string) => void): void {
    this.local.subscribe(channel, handler);
    this.channels.add(channel);
    this.sub
      .subscribe(this.prefix + channel)
      .then(() => this.local.publish(channel, 'resync'))
      .catch(() => {});
  }

  async ping(): Promise<boolean | null> {
    try {
      return (await this.pub.ping()) === 'PONG';
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
