import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay in front of PostgreSQL that can lose a connection at a precise protocol moment (the
 * database faults of docs/ai-proxy.md):
 * `cutNextCommit(marker)` drops the connection right after the server answered COMMIT (CommandComplete
 * "COMMIT") for a transaction whose client bytes contained `marker` (a statement name or SQL text).
 * The server has committed by then; the client only sees the connection die: the classic
 * commit-after-disconnect. `cutNextBefore(marker)` drops the connection as soon as the client sends
 * bytes containing marker (before the server ever sees them): nothing of that transaction commits.
 * `cutNextCommitSent(marker)` drops it when the client sends COMMIT for a transaction that sent marker,
 * before the server sees the COMMIT: the transaction rolls back, and its client cannot know.
 * `refuseConnections(true)` ends every connection at once, new ones as they come: the database unreachable.
 */
export interface PgRelay {
  url: string;
  /** Arm: the next COMMIT answer of a transaction that sent `marker` is never delivered. Resolves when it fired. */
  cutNextCommit(marker: string): Promise<void>;
  /** Arm: the next client write containing `marker` kills the connection instead of reaching the server. */
  cutNextBefore(marker: string): Promise<void>;
  /** Arm: the COMMIT of the next transaction that sent `marker` kills the connection instead of reaching the server. */
  cutNextCommitSent(marker: string): Promise<void>;
  /** While on, every connection (open or new) is ended at once. */
  refuseConnections(on: boolean): void;
  disarm(): void;
  fired: number;
  close(): Promise<void>;
}

interface Arm {
  kind: 'commit' | 'before' | 'commitSent';
  marker: string;
  resolve: () => void;
}

export async function startPgRelay(upstreamUrl: string): Promise<PgRelay> {
  const upstream = new URL(upstreamUrl);
  const sockets = new Set<Socket>();
  let arm: Arm | null = null;
  const state = { fired: 0, refusing: false };

  const server: Server = createServer((client) => {
    if (state.refusing) {
      client.destroy();
      return;
    }
    const pgSocket = connect(Number(upstream.port || 5432), upstream.hostname);
    sockets.add(client);
    sockets.add(pgSocket);
    client.on('close', () => sockets.delete(client));
    pgSocket.on('close', () => sockets.delete(pgSocket));
    let sawMarker = false;
    let serverBuf = Buffer.alloc(0);
    let dead = false;
    const kill = () => {
      dead = true;
      client.destroy();
      pgSocket.destroy();
    };
    client.on('error', () => pgSocket.destroy());
    pgSocket.on('error', () => client.destroy());
    client.on('data', (chunk: Buffer) => {
      if (dead) return;
      const text = chunk.toString('latin1');
      const marked = arm !== null && text.includes(arm.marker);
      if (marked) sawMarker = true;
      if (arm && ((arm.kind === 'before' && marked) || (arm.kind === 'commitSent' && sawMarker && /\bCOMMIT\b/.test(text)))) {
        const a = arm;
        arm = null;
        state.fired++;
        kill();
        a.resolve();
        return;
      }
      pgSocket.write(chunk);
    });
    pgSocket.on('data', (chunk: Buffer) => {
      if (dead) return;
      serverBuf = Buffer.concat([serverBuf, chunk]);
      // Walk whole messages: type byte + int32 length (includes itself).
      let offset = 0;
      while (serverBuf.length - offset >= 5) {
        const type = String.fromCharCode(serverBuf[offset]!);
        const len = serverBuf.readInt32BE(offset + 1);
        if (serverBuf.length - offset < 1 + len) break;
        if (type === 'C') {
          const tag = serverBuf.toString('latin1', offset + 5, offset + len).replace(/\0+$/, '');
          if (tag === 'COMMIT' || tag === 'ROLLBACK') {
            if (tag === 'COMMIT' && sawMarker && arm?.kind === 'commit') {
              const a = arm;
              arm = null;
              state.fired++;
              // Deliver what came before the COMMIT answer, never the answer itself.
              if (offset > 0) client.write(serverBuf.subarray(0, offset));
              kill();
              a.resolve();
              return;
            }
            sawMarker = false;
          }
        }
        offset += 1 + len;
      }
      if (offset > 0) client.write(serverBuf.subarray(0, offset));
      serverBuf = serverBuf.subarray(offset);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(upstream);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    get fired() {
      return state.fired;
    },
    cutNextCommit(marker) {
      return new Promise<void>((resolve) => {
        arm = { kind: 'commit', marker, resolve };
      });
    },
    cutNextBefore(marker) {
      return new Promise<void>((resolve) => {
        arm = { kind: 'before', marker, resolve };
      });
    },
    cutNextCommitSent(marker) {
      return new Promise<void>((resolve) => {
        arm = { kind: 'commitSent', marker, resolve };
      });
    },
    refuseConnections(on) {
      state.refusing = on;
      if (on) for (const s of sockets) s.destroy();
    },
    disarm() {
      arm = null;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
