/**
 * The OpenAI-compatible stand-in (test/ai-stand-in) in a process of its own for bench/ai.ts, so neither
 * the load generator nor creditgate shares its event loop. IPC calls:
 *   options  set replyTokens / chunkDelayMs for the next requests
 *   counts   requests answered so far (the recorded lists are emptied as the run goes: they would grow)
 */
import { startOpenAiStandIn, type StandInOptions } from '../../test/ai-stand-in/index.js';
import { serveParent } from './child.js';

const standIn = await startOpenAiStandIn({ models: ['gpt-4o-mini'] });
let answered = 0;
setInterval(() => {
  answered += standIn.requests.length;
  standIn.requests.length = 0;
  standIn.usages.length = 0;
}, 500).unref();

serveParent(Number(new URL(standIn.url).port), {
  options: async (args) => {
    standIn.setOptions(args as Partial<StandInOptions>);
    return null;
  },
  counts: async () => ({ answered: answered + standIn.requests.length, aborted: standIn.aborted }),
});
