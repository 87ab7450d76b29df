/**
 * A local MCP server over stdio whose two tools are metered by creditgate (stdio mode, with an
 * organization API key). Each call is checked before it runs, with its cost held, and recorded once
 * it has succeeded. A refused call comes back as a tool error that the model can read.
 *
 *   CREDITGATE_API_KEY=cg_… npm start
 *
 * stdout carries the MCP protocol, so everything meant for people goes to stderr.
 */
import { withMetering } from '@creditgate/client/mcp';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import * as z from 'zod';

const log = (message: string): void => {
  process.stderr.write(`[stdio-server] ${message}\n`);
};

/** First `count` sentences of `text`, with how much was left out. */
function summarize(text: string, count: number): string {
  const sentences = text.trim().split(/(?<=[.!?])\s+/).filter(Boolean);
  const words = text.trim().split(/\s+/).filter(Boolean).length;
  return `${sentences.slice(0, count).join(' ')}\n\n(${Math.min(count, sentences.length)} of ${sentences.length} sentences, ${words} words)`;
}

// Word-for-word "translation": deterministic fake work for the example, no network.
const DICTIONARY: Record<'fr' | 'es' | 'de', Record<string, string>> = {
  fr: { hello: 'bonjour', world: 'monde', the: 'le', cat: 'chat', dog: 'chien', is: 'est', good: 'bon', and: 'et', thank: 'merci', you: 'vous', credit: 'crédit', tool: 'outil' },
  es: { hello: 'hola', world: 'mundo', the: 'el', cat: 'gato', dog: 'perro', is: 'es', good: 'bueno', and: 'y', thank: 'gracias', you: 'tú', credit: 'crédito', tool: 'herramienta' },
  de: { hello: 'hallo', world: 'Welt', the: 'der', cat: 'Katze', dog: 'Hund', is: 'ist', good: 'gut', and: 'und', thank: 'danke', you: 'du', credit: 'Kredit', tool: 'Werkzeug' },
};

function translate(text: string, to: keyof typeof DICTIONARY): string {
  const words = DICTIONARY[to];
  return text.replace(/\p{L}+/gu, (word) => {
    const found = words[word.toLowerCase()];
    if (!found) return word;
    return word[0] === word[0]?.toUpperCase() ? found[0]!.toUpperCase() + found.slice(1) : found;
  });
}

async function main(): Promise<void> {
  const apiKey = process.env.CREDITGATE_API_KEY?.trim();
  if (!apiKey) {
    log('CREDITGATE_API_KEY is not set, so tool calls cannot be metered; not starting.');
    log('Create an organization API key with scopes read and write (`npx creditgate demo` prints one), then start with');
    log('  CREDITGATE_API_KEY=cg_… CREDITGATE_URL=http://127.0.0.1:8080 npm start');
    process.exitCode = 1;
    return;
  }
  const baseUrl = process.env.CREDITGATE_URL ?? 'http://127.0.0.1:8080';

  const server = new McpServer({ name: 'creditgate-example-stdio', version: '0.1.0' });
  // Before any registerTool: every tool registered afterwards is metered.
  const meter = withMetering(server, { apiKey, baseUrl, outbox: process.env.CREDITGATE_OUTBOX_DIR });

  server.registerTool(
    'summarize',
    {
      description: 'Shortens a text to its first sentences.',
      inputSchema: { text: z.string().min(1).max(100_000), sentences: z.number().int().min(1).max(20).default(2) },
    },
    async ({ text, sentences }) => ({ content: [{ type: 'text', text: summarize(text, sentences) }] }),
  );
  server.registerTool(
    'translate',
    {
      description: 'Translates a text word for word into French, Spanish or German (a toy dictionary).',
      inputSchema: { text: z.string().min(1).max(10_000), to: z.enum(['fr', 'es', 'de']) },
    },
    async ({ text, to }) => ({ content: [{ type: 'text', text: translate(text, to) }] }),
  );

  let closing: Promise<void> | undefined;
  const shutdown = (why: string): Promise<void> => {
    closing ??= (async () => {
      log(`${why}; shutting down`);
      await server.close();
      // Waits for an outbox flush in progress; what is still queued is sent on the next start.
      await meter.close();
    })();
    return closing;
  };
  // The client closed our stdin: nothing more will come. The process then ends by itself once the
  // last usage record in flight has been sent.
  process.stdin.once('end', () => void shutdown('client disconnected'));
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void shutdown(`${signal} received`).finally(() => setTimeout(() => process.exit(0), 5_000).unref());
    });
  }

  await server.connect(new StdioServerTransport());
  log(`ready: tools summarize and translate, metered against ${baseUrl}`);
}

main().catch((err: unknown) => {
  // A bad CREDITGATE_URL, for instance: one line, not a stack trace.
  log(`cannot start: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
