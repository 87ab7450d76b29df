/** The example's two tools: deterministic fake work, no network. Metering is not their concern. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import * as z from 'zod';

const DOCS = [
  { id: 'billing-periods', title: 'Billing periods', text: 'The monthly allocation resets at the start of each billing period; purchased credits do not reset.' },
  { id: 'api-keys', title: 'API keys', text: 'Create an API key with read and write scopes to meter a local MCP server.' },
  { id: 'service-mode', title: 'Service mode', text: 'Hosted MCP servers meter each end user with the shared service key.' },
  { id: 'refunds', title: 'Refunds', text: 'A usage record can be refunded in part or in whole, with a reason.' },
  { id: 'tiers', title: 'Tiers', text: 'The sandbox tier cannot run metered tools; launch and above can.' },
];

const words = (text: string): string[] => text.toLowerCase().match(/\p{L}+/gu) ?? [];

/** Documents sharing the most words with the query, best first. */
function searchDocs(query: string, limit: number) {
  const wanted = new Set(words(query));
  return DOCS.map((doc) => ({ doc, score: words(`${doc.title} ${doc.text}`).filter((w) => wanted.has(w)).length }))
    .filter((hit) => hit.score > 0)
    .sort((a, b) => b.score - a.score || a.doc.id.localeCompare(b.doc.id))
    .slice(0, limit)
    .map(({ doc, score }) => ({ id: doc.id, title: doc.title, score }));
}

export function registerTools(server: McpServer): void {
  server.registerTool(
    'search_docs',
    {
      description: 'Searches the product documentation.',
      inputSchema: { query: z.string().min(1).max(1_000), limit: z.number().int().min(1).max(5).default(3) },
      // With an outputSchema, the metering middleware's denials carry no structuredContent (see withMetering).
      outputSchema: { results: z.array(z.object({ id: z.string(), title: z.string(), score: z.number() })) },
    },
    async ({ query, limit }) => {
      const results = searchDocs(query, limit);
      const text = results.length === 0 ? `Nothing found for "${query}".` : results.map((r) => `${r.title} (${r.id})`).join('\n');
      return { content: [{ type: 'text', text }], structuredContent: { results } };
    },
  );
  server.registerTool(
    'draft_reply',
    {
      description: 'Drafts a short reply to a customer message.',
      inputSchema: { customer: z.string().min(1).max(200), message: z.string().min(1).max(10_000) },
    },
    async ({ customer, message }) => {
      const topic = words(message).slice(0, 6).join(' ');
      const text = `Hi ${customer},\n\nThank you for your message about "${topic}". We are looking into it and will get back to you within one business day.\n\nBest regards`;
      return { content: [{ type: 'text', text }] };
    },
  );
}
