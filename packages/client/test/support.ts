/**
 * A real creditgate for the client's tests: the service app on a loopback port (same database
 * harness as the service's own tests), plus a TCP relay in front of it that a test can take down
 * and bring back to stand for a platform outage.
 */
import { createServer, type Server, type Socket, connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Config } from '../../../src/config.js';
import { createHarness, type Harness } from '../../../test/harness.js';

export interface LiveService {
  h: Harness;
  /** http://127.0.0.1:<port> of the service itself. */
  baseUrl: string;
  close(): Promise<void>;
}

export async function startLiveService(overrides: Partial<Config> = {}): Promise<LiveService> {
  const h = await createHarness(overrides);
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = h.app.server.address() as AddressInfo;
  return { h, baseUrl: `http://127.0.0.1:${port}`, close: () => h.close() };
}

export interface Relay {
  /** http://127.0.0.1:<port> of the relay. */
  baseUrl: string;
  /** While down, every connection is reset at once (the client sees a network error). */
  down(): void;
  up(): void;
  /** Connections accepted while up (each carries one or more HTTP requests). */
  readonly forwarded: number;
  close(): Promise<void>;
}

/** A TCP relay to `target` that can fail like an unreachable platform. */
export async function startRelay(target: string): Promise<Relay> {
  const { hostname, port } = new URL(target);
  let isDown = false;
  let forwarded = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    if (isDown) {
      socket.resetAndDestroy();
      return;
    }
    forwarded++;
    const upstream = connect(Number(port), hostname);
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    socket.pipe(upstream).pipe(socket);
    socket.on('error', () => upstream.destroy());
    upstream.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${address.port}`,
    down() {
      isDown = true;
      // Kept-alive connections would otherwise still reach the service.
      for (const socket of sockets) socket.destroy();
    },
    up() {
      isDown = false;
    },
    get forwarded() {
      return forwarded;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
