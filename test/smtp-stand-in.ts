import { createServer, type Server, type Socket } from 'node:net';

/** One message as the stand-in received it. */
export interface ReceivedMail {
  from: string;
  to: string[];
  /** The DATA section, dot-unstuffed, with quoted-printable soft breaks joined. */
  data: string;
  /** The decoded AUTH PLAIN credentials, when the client authenticated. */
  auth: { user: string; pass: string } | null;
}

export interface SmtpStandIn {
  port: number;
  url: string;
  messages: ReceivedMail[];
  /** Resolve once `count` messages arrived; reject after `timeoutMs` (no test waits on luck). */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedMail[]>;
  close(): Promise<void>;
}

/**
 * A minimal SMTP server on 127.0.0.1 (RFC 5321 happy path: EHLO, AUTH PLAIN/LOGIN, MAIL, RCPT, DATA,
 * RSET, NOOP, QUIT), enough for nodemailer. `rejectData` answers 554 to the end of DATA.
 */
export async function startSmtpStandIn(options: { rejectData?: boolean } = {}): Promise<SmtpStandIn> {
  const messages: ReceivedMail[] = [];
  const sockets = new Set<Socket>();
  const waiters: Array<() => void> = [];

  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffer = '';
    let inData = false;
    let dataLines: string[] = [];
    let from = '';
    let to: string[] = [];
    let auth: ReceivedMail['auth'] = null;
    let loginStep: 0 | 1 | 2 = 0;
    let loginUser = '';
    const reply = (line: string) => socket.write(`${line}\r\n`);
    reply('220 127.0.0.1 ESMTP stand-in');

    const onLine = (line: string) => {
      if (inData) {
        if (line === '.') {
          inData = false;
          if (options.rejectData) {
            reply('554 5.7.1 Message rejected');
          } else {
            const data = dataLines.join('\r\n').replace(/=\r\n/g, '');
            messages.push({ from, to, data, auth });
            reply('250 2.0.0 Ok: queued');
            for (const wake of waiters.splice(0)) wake();
          }
          dataLines = [];
          return;
        }
        dataLines.push(line.startsWith('..') ? line.slice(1) : line);
        return;
      }
      if (loginStep === 1) {
        loginUser = Buffer.from(line, 'base64').toString('utf8');
        loginStep = 2;
        reply('334 UGFzc3dvcmQ6');
        return;
      }
      if (loginStep === 2) {
        auth = { user: loginUser, pass: Buffer.from(line, 'base64').toString('utf8') };
        loginStep = 0;
        reply('235 2.7.0 Authentication successful');
        return;
      }
      const verb = line.split(' ')[0]!.toUpperCase();
      switch (verb) {
        case 'EHLO':
          reply('250-127.0.0.1');
          reply('250-AUTH PLAIN LOGIN');
          reply('250-8BITMIME');
          reply('250 SMTPUTF8');
          return;
        case 'HELO':
          return reply('250 127.0.0.1');
        case 'AUTH': {
          const [, mech, initial] = line.split(' ');
          if (mech?.toUpperCase() === 'PLAIN' && initial) {
            const [, user = '', pass = ''] = Buffer.from(initial, 'base64').toString('utf8').split('\0');
            auth = { user, pass };
            return reply('235 2.7.0 Authentication successful');
          }
          if (mech?.toUpperCase() === 'LOGIN') {
            loginStep = 1;
            return reply('334 VXNlcm5hbWU6');
          }
          return reply('504 5.5.4 Unrecognized authentication type');
        }
        case 'MAIL':
          from = /<([^>]*)>/.exec(line)?.[1] ?? '';
          to = [];
          return reply('250 2.1.0 Ok');
        case 'RCPT':
          to.push(/<([^>]*)>/.exec(line)?.[1] ?? '');
          return reply('250 2.1.5 Ok');
        case 'DATA':
          inData = true;
          return reply('354 End data with <CR><LF>.<CR><LF>');
        case 'RSET':
          from = '';
          to = [];
          return reply('250 2.0.0 Ok');
        case 'NOOP':
          return reply('250 2.0.0 Ok');
        case 'QUIT':
          reply('221 2.0.0 Bye');
          socket.end();
          return;
        default:
          return reply('502 5.5.2 Command not recognized');
      }
    };

    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      let index = buffer.indexOf('\r\n');
      while (index !== -1) {
        const line = buffer.slice(0, index);
        buffer = buffer.slice(index + 2);
        onLine(line);
        index = buffer.indexOf('\r\n');
      }
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    port,
    url: `smtp://127.0.0.1:${port}`,
    messages,
    waitFor(count, timeoutMs = 5_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`SMTP stand-in: ${messages.length} of ${count} messages after ${timeoutMs} ms`)), timeoutMs);
        const check = () => {
          if (messages.length >= count) {
            clearTimeout(timer);
            resolve(messages);
          } else waiters.push(check);
        };
        check();
      });
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A port on 127.0.0.1 that nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
