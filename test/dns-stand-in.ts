import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';

/**
 * A DNS server on loopback UDP for tests (docs/templates.md, Custom domains): it parses each query's
 * question (RFC 1035 §4.1) and answers from a table the test sets: TXT records (each a list of
 * character-strings, so multi-string records can be served), silence (the client times out) or
 * SERVFAIL. A name not in the table is NXDOMAIN; a known name asked for another type is NODATA.
 * The product reaches it through its own resolver with DNS_SERVERS=127.0.0.1:<port>.
 */
export type DnsAnswer = { txt: string[][] } | 'silent' | 'servfail';

export interface DnsStandIn {
  /** `127.0.0.1:<port>`, as DNS_SERVERS takes it. */
  server: string;
  /** Questions received, lower-cased: `TXT _creditgate-challenge.example.com`. */
  queries: string[];
  set(name: string, answer: DnsAnswer): void;
  close(): Promise<void>;
}

const TYPE_TXT = 16;
const CLASS_IN = 1;
const RCODE = { noError: 0, servFail: 2, nxDomain: 3, formErr: 1 } as const;

/** The question's name, type and class, and where the question ends; null when malformed. */
function parseQuestion(msg: Buffer): { name: string; type: number; end: number } | null {
  if (msg.length < 12 || msg.readUInt16BE(4) !== 1) return null;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const length = msg[at];
    if (length === undefined || length > 63) return null; // no compression in a question (RFC 1035 §4.1.4)
    at += 1;
    if (length === 0) break;
    if (at + length > msg.length) return null;
    labels.push(msg.toString('latin1', at, at + length));
    at += length;
  }
  if (at + 4 > msg.length) return null;
  return { name: labels.join('.').toLowerCase(), type: msg.readUInt16BE(at), end: at + 4 };
}

function txtRdata(record: string[]): Buffer {
  return Buffer.concat(
    record.map((chunk) => {
      const bytes = Buffer.from(chunk, 'utf8');
      if (bytes.length > 255) throw new Error('a TXT character-string holds at most 255 bytes: split it');
      return Buffer.concat([Buffer.from([bytes.length]), bytes]);
    }),
  );
}

/** A response: the query's id, QR and AA set, RD copied, RA set; the question echoed; answers name it by pointer. */
function response(query: Buffer, questionEnd: number, rcode: number, records: string[][]): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0);
  const rd = query[2]! & 0x01;
  header[2] = 0x80 | 0x04 | rd;
  header[3] = 0x80 | rcode;
  header.writeUInt16BE(questionEnd > 12 ? 1 : 0, 4);
  header.writeUInt16BE(records.length, 6);
  const answers = records.map((record) => {
    const rdata = txtRdata(record);
    const fixed = Buffer.alloc(12);
    fixed.writeUInt16BE(0xc00c, 0); // the name at offset 12: the question's
    fixed.writeUInt16BE(TYPE_TXT, 2);
    fixed.writeUInt16BE(CLASS_IN, 4);
    fixed.writeUInt32BE(60, 6);
    fixed.writeUInt16BE(rdata.length, 10);
    return Buffer.concat([fixed, rdata]);
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...answers]);
}

export async function startDnsStandIn(): Promise<DnsStandIn> {
  const table = new Map<string, DnsAnswer>();
  const queries: string[] = [];
  const socket: Socket = createSocket('udp4');
  socket.on('message', (msg: Buffer, from: RemoteInfo) => {
    const reply = (buf: Buffer) => socket.send(buf, from.port, from.address);
    const question = parseQuestion(msg);
    if (!question) {
      if (msg.length >= 12) reply(response(msg, 12, RCODE.formErr, []));
      return;
    }
    queries.push(`${question.type === TYPE_TXT ? 'TXT' : `TYPE${question.type}`} ${question.name}`);
    const answer = table.get(question.name);
    if (answer === 'silent') return;
    if (answer === 'servfail') return reply(response(msg, question.end, RCODE.servFail, []));
    if (answer === undefined) return reply(response(msg, question.end, RCODE.nxDomain, []));
    reply(response(msg, question.end, RCODE.noError, question.type === TYPE_TXT ? answer.txt : []));
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    server: `127.0.0.1:${socket.address().port}`,
    queries,
    set: (name, answer) => table.set(name.toLowerCase(), answer),
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
