import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, type Tenant, unique } from '../../../test/harness.js';
import { createDeployment } from '../deployments/service.js';
import * as M from '../../../test/money-model.js';
import {
  adoptIds,
  type BatchOp,
  type BudgetChange,
  booksMismatches,
  describeOp,
  modelOp,
  modelRows,
  type Real,
  type RealAnswer,
  realAdvance,
  realAiHold,
  realAiRelease,
  realAiSettle,
  realChangePurchased,
  realCreateBudgets,
  realOp,
  realRefund,
  realRows,
  realTouch,
  realWindows,
  modelWindows,
  userOf,
  sameAnswer,
  type World,
} from '../../../test/money-model-real.js';

/**
 * The model that checks the money engine (docs/metering.md, "The model"): fast-check generates
 * sequences of operations on two deployments — record-usage with and without invocation ids (replays),
 * reservations and releases, operator grants and adjustments, refunds, AI holds settled above or below
 * what they held (credits owed) or released, clock moves across period ends and the idempotency window,
 * and steps of 2–5 records/reservations/releases/budget changes sent at once through the group commit —
 * and runs each on the in-memory model (test/money-model.ts) and on the real engine. The two deployments
 * are in organizations of their own or in one, with budgets (docs/budgets.md: block or alert, of every
 * scope and window kind, credits and AI tokens) made, deleted and given other credit limits or window
 * kinds mid-run. After every step the answers agree (for a concurrent step: those of some serial order
 * of its operations), the balance rows, the usage totals and every budget window's count equal the model's, and
 * findLedgerMismatches and findOwedMismatches find nothing.
 *
 * MODEL_RUNS raises the runs (npm run test:model: 10×); a failure prints its seed and path: replay it with
 * MODEL_SEED=<seed> MODEL_PATH=<path> (and MODEL_REPLAY=<replayPath> for the shrunk command list).
 */
const RUNS = Number(process.env.MODEL_RUNS ?? 30);
const SEED = process.env.MODEL_SEED === undefined ? undefined : Number(process.env.MODEL_SEED);
const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

let h: Harness;
let tools: [string, string];
beforeAll(async () => {
  h = await createHarness(process.env.MODEL_LOG ? { logLevel: 'error' } : {});
  const advanced = unique('model-tool');
  const res = await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${advanced}`, headers: adminHeaders(h), payload: { action: 'task_advanced' } });
  expect(res.statusCode, res.body).toBe(200);
  tools = [unique('model-basic'), advanced];
});
afterAll(async () => {
  if (process.env.MODEL_STATS) console.log([...stats].sort().map(([k, n]) => `${n}\t${k}`).join('\n'));
  await h?.close();
});

type Cmd = fc.AsyncCommand<World, Real>;

/** Every step ends here: the balance rows and usage totals equal the model's, and the books balance. */
async function compareState(w: World, r: Real, step: string): Promise<void> {
  expect(r.h.clock.now().getTime(), step).toBe(w.now);
  expect(await realRows(r), `after ${step}`).toEqual(modelRows(w));
  expect(await realWindows(r, w), `budget windows after ${step}`).toEqual(modelWindows(w));
  expect(await booksMismatches(r), `books after ${step}`).toEqual([]);
}

/** MODEL_STATS=1 prints how often each kind of answer came (to see what the runs reached). */
const stats = new Map<string, number>();
function count(step: string, a: M.Answer): void {
  const b = a.body;
  const refused = b.success === false || b.allowed === false ? `refused ${String(b.error ?? b.reason)}` : 'ok';
  const what = b.replayed || a.replayed ? 'replayed' : (b.code ?? refused);
  const key = `${step.replace(/\(.*/, '')} ${a.status} ${String(what)}${Number(b.creditsShort) > 0 ? ' owed' : ''}${Number(b.credits_forfeited) > 0 ? ' forfeited' : ''}`;
  stats.set(key, (stats.get(key) ?? 0) + 1);
}

function expectAnswer(w: World, step: string, expected: M.Answer, real: RealAnswer): void {
  count(step, expected);
  if (!sameAnswer(w, expected, real)) {
    const { usage, ...rest } = expected.body as { usage?: M.Usage | null };
    const shown = { ...expected, body: { ...rest, ...(usage === undefined ? {} : { usage_id: usage?.id ?? (usage ? '(new)' : null) }) } };
    expect(real, `answer of ${step}`).toEqual(shown);
  }
  adoptIds(expected, real);
}

/** One step: run it on the model and the engine, compare the answer, then the state. */
function step(label: string, run: (w: World, r: Real) => Promise<void>, ok: (w: World) => boolean = () => true): Cmd {
  return {
    check: ok,
    run: async (w, r) => {
      await run(w, r);
      await compareState(w, r, label);
    },
    toString: () => label,
  };
}

const dep = fc.integer({ min: 0, max: 1 });
const tool = fc.constantFrom<0 | 1>(0, 1);
const inv = fc.constantFrom('i0', 'i1', 'i2', 'i3');
const user = fc.constantFrom<string | null>('u0', 'u1', null);
const windowKind = fc.constantFrom<M.BudgetModel['window']>('hour', 'day', 'week', 'month', 'period');
/**
 * A budget changed or deleted mid-run, alone or beside the charges of a step sent at once (docs/budgets.md:
 * a limit or mode keeps the windows' counts, and a limit lowered below them refuses; another window kind
 * starts new windows; a deleted budget counts nothing more).
 */
const budgetChange: fc.Arbitrary<BudgetChange> = fc.oneof(
  { arbitrary: fc.integer({ min: 1, max: 15 }).map((limit) => ({ limit })), weight: 3 },
  { arbitrary: windowKind.map((window) => ({ window })), weight: 2 },
  { arbitrary: fc.boolean().map((block) => ({ block })), weight: 1 },
  { arbitrary: fc.constant('delete' as const), weight: 1 },
);
const batchOp: fc.Arbitrary<BatchOp> = fc.oneof(
  {
    arbitrary: fc
      .record({ kind: fc.constant('record' as const), dep, tool, inv: fc.option(inv, { nil: null }), stdio: fc.boolean(), user })
      .map((op) => (op.inv === null ? op : { ...op, user: userOf(op.inv) })),
    weight: 4,
  },
  { arbitrary: fc.record({ kind: fc.constant('reserve' as const), dep, tool, inv }).map((op) => ({ ...op, user: userOf(op.inv) })), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant('release' as const), dep, inv }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant('budget' as const), dep, pick: fc.nat(), change: budgetChange }), weight: 1 },
);
const cls = fc.constantFrom<M.ModelClass>('standard', 'advanced', 'premium');

const single = batchOp.map((op) =>
  step(describeOp(op), async (w, r) => {
    const real = await realOp(r, op, w);
    expectAnswer(w, describeOp(op), modelOp(w, op), real);
  }),
);

/** Operations sent at once (the group commit batches them): the answers and the state of some serial order. */
const together = fc.array(batchOp, { minLength: 2, maxLength: 5 }).map((ops) => {
  const label = `together[${ops.map(describeOp).join(', ')}]`;
  return step(
    label,
    async (w, r) => {
      const answers = await Promise.all(ops.map((op) => realOp(r, op, w)));
      const rows = await realRows(r);
      const windows = await realWindows(r, w);
      for (const order of permutations(ops.length)) {
        const trial: World = { now: w.now, deps: M.cloneDeployments(w.deps) };
        const expected: M.Answer[] = [];
        const late: Array<{ index: number; seen: Set<M.Invocation['status']> }> = [];
        for (const i of order) {
          expected[i] = modelOp(trial, ops[i]!);
          const op = ops[i]!;
          const e = expected[i]!;
          if (op.kind === 'release' && (e.status === 409 || (e.status === 200 && e.body.released_credits === 0))) late.push({ index: i, seen: new Set() });
          for (const l of late) {
            const o = ops[l.index] as BatchOp & { kind: 'release' };
            const status = trial.deps[o.dep]!.invocations.get(o.inv)?.status;
            if (status) l.seen.add(status);
          }
        }
        // A release that gave nothing back answers from the status it reads after its own commit
        // (metering/invocations.ts): an operation of the same step on that id may have changed it since.
        for (const l of late) expected[l.index] = { ...expected[l.index]!, anyOf: [...l.seen].map(M.releasedNothing) };
        if (!expected.every((e, i) => sameAnswer(w, e, answers[i]!))) continue;
        if (!isDeepStrictEqual(modelRows(trial), rows) || !isDeepStrictEqual(modelWindows(trial), windows)) continue;
        expected.forEach((e, i) => {
          count(`together ${ops[i]!.kind}`, e);
          adoptIds(e, answers[i]!);
        });
        w.deps = trial.deps;
        return;
      }
      expect({ answers, rows, windows }, `no serial order of ${label} explains what the engine did`).toEqual({
        answers: 'one of the serial orders',
        rows: modelRows(w),
        windows: modelWindows(w),
      });
    },
  );
});

const changePurchased = fc.record({ dep, amount: fc.integer({ min: -15, max: 25 }).filter((n) => n !== 0) }).map(({ dep, amount }) =>
  step(`${amount > 0 ? 'grant' : 'adjust'}(d${dep}, ${amount})`, async (w, r) => {
    const expected = M.changePurchased(w.deps[dep]!, w.now, amount);
    expectAnswer(w, 'change', expected, await realChangePurchased(r, dep, amount));
  }),
);

const refund = fc.record({ dep, pick: fc.nat(), amount: fc.option(fc.integer({ min: 1, max: 4 }), { nil: undefined }) }).map(({ dep, pick, amount }) =>
  step(
    `refund(d${dep}, usage #${pick}, ${amount ?? 'all'})`,
    async (w, r) => {
      const d = w.deps[dep]!;
      const usage = d.usages[pick % d.usages.length]!;
      const expected = M.refund(d, w.now, usage, amount);
      expectAnswer(w, 'refund', expected, await realRefund(r, usage.id!, amount));
    },
    (w) => w.deps[dep]!.usages.length > 0,
  ),
);

/** An AI call's hold, made by the API key or not, for an end user or none (docs/budgets.md, AI calls). */
const aiHold = fc
  .record({ dep, prompt: fc.integer({ min: 0, max: 1500 }), output: fc.integer({ min: 0, max: 2500 }), cls, byKey: fc.boolean(), user })
  .map(({ dep, prompt, output, cls, byKey, user }) =>
  step(`aiHold(d${dep}, ${prompt}+${output} ${cls}${byKey ? ', by key' : ''}${user ? `, ${user}` : ''})`, async (w, r) => {
    const d = w.deps[dep]!;
    // The API key charges only the deployment it belongs to (the primary).
    const by = { stdio: byKey && d.keyed, user };
    const expected = M.aiHold(d, w.now, prompt, output, cls, by);
    const real = await realAiHold(r, dep, prompt, output, cls, by);
    expectAnswer(w, 'aiHold', expected, real);
    if (expected.hold) expected.hold.id = real.id!;
  }),
);

const holdOf = (w: World, dep: number, pick: number) => w.deps[dep]!.holds[pick % w.deps[dep]!.holds.length]!;
const hasHold = (dep: number) => (w: World) => w.deps[dep]!.holds.length > 0;

const aiSettle = fc.record({ dep, pick: fc.nat(), tokens: fc.integer({ min: 0, max: 9000 }) }).map(({ dep, pick, tokens }) =>
  step(
    `aiSettle(d${dep}, hold #${pick}, ${tokens} tokens)`,
    async (w, r) => {
      const hold = holdOf(w, dep, pick);
      const expected = M.aiSettle(w.deps[dep]!, w.now, hold, tokens);
      const real = await realAiSettle(r, dep, hold.id!, hold.cls, tokens);
      expectAnswer(w, 'aiSettle', expected, real);
      if (hold.usage && hold.usage.id === null) hold.usage.id = real.body.usage_id as string;
    },
    hasHold(dep),
  ),
);

const aiRelease = fc.record({ dep, pick: fc.nat() }).map(({ dep, pick }) =>
  step(
    `aiRelease(d${dep}, hold #${pick})`,
    async (w, r) => {
      const hold = holdOf(w, dep, pick);
      expectAnswer(w, 'aiRelease', M.aiRelease(w.deps[dep]!, w.now, hold), await realAiRelease(r, dep, hold.id!));
    },
    hasHold(dep),
  ),
);

/** Minutes (reservations lapse after 5), a day (the idempotency window), a month or two (period ends). */
const advance = fc.constantFrom(MINUTE, 4 * MINUTE, 6 * MINUTE, 3 * 60 * MINUTE, 25 * 60 * MINUTE, 10 * DAY, 31 * DAY, 62 * DAY).map((ms) =>
  step(`advance(${ms / MINUTE} min)`, async (w, r) => {
    w.now += ms;
    for (const d of w.deps) M.expireReservations(d, w.now);
    await realAdvance(r, ms);
  }),
);

const touch = dep.map((d) =>
  step(`read(d${d})`, async (w, r) => {
    M.touch(w.deps[d]!, w.now);
    await realTouch(r, d);
  }),
);

/**
 * Budgets of a deployment's organization: on the organization, the deployment, its API key, one end user
 * or each apart, one tool (t0, or the AI calls' model) or each apart, optionally narrowed to the
 * deployment; of credits, AI tokens or both; small limits, so that runs reach them.
 */
type ChosenBudget = Omit<M.BudgetModel, 'deployment'> & { narrow: boolean };
const budget: fc.Arbitrary<ChosenBudget> = fc
  .record({
    narrow: fc.boolean(),
    on: fc.constantFrom('organization', 'deployment', 'api_key', 'user:*', 'user:u0', '*', 't0', M.AI_TOOL),
    credits: fc.option(fc.integer({ min: 1, max: 15 }), { nil: null, freq: 4 }),
    tokens: fc.option(fc.integer({ min: 100, max: 4000 }), { nil: null, freq: 2 }),
    window: fc.constantFrom<M.BudgetModel['window']>('hour', 'day', 'week', 'month', 'period'),
    block: fc.constantFrom(true, true, true, false),
  })
  .map(({ narrow, on, credits, tokens, window, block }) => ({
    id: null,
    narrow: narrow || on === 'deployment',
    scope: on === 'organization' || on === 'deployment' || on === 'api_key' ? on : on.startsWith('user:') ? 'end_user' : 'tool',
    tool: on === 'organization' || on === 'deployment' || on === 'api_key' || on.startsWith('user:') ? null : on,
    user: on.startsWith('user:') ? on.slice(5) : null,
    // At least one limit.
    limit: credits === null && tokens === null ? 5 : credits,
    limitTokens: tokens,
    window,
    block,
  }));

/**
 * A budget made mid-run on a deployment's organization (up to six there): it counts the charges made
 * from then on (docs/budgets.md, Decided here), not the holds made before it.
 */
const budgetMade = fc.record({ dep, chosen: budget }).map(({ dep, chosen }) =>
  step(
    `budgetMade(d${dep}, ${chosen.scope}${chosen.tool ? ` ${chosen.tool}` : ''}${chosen.user ? ` ${chosen.user}` : ''}${chosen.narrow ? ' narrowed' : ''}, ${chosen.limit ?? '-'} credits, ${chosen.limitTokens ?? '-'} tokens, ${chosen.window}${chosen.block ? '' : ', alert'})`,
    async (w, r) => {
      const { narrow, ...b } = chosen;
      const made: M.BudgetModel = { ...b, deployment: narrow ? dep : null };
      w.deps[dep]!.org.budgets.push(made);
      await realCreateBudgets(r, dep, [made]);
    },
    (w) => w.deps[dep]!.org.budgets.length < 6,
  ),
);

const commands = fc.commands(
  [single, single, single, together, together, changePurchased, refund, refund, aiHold, aiHold, aiSettle, aiSettle, aiRelease, advance, advance, touch, budgetMade],
  { maxCommands: 40, size: 'max', ...(process.env.MODEL_REPLAY ? { replayPath: process.env.MODEL_REPLAY } : {}) },
);

/**
 * Each run: two fresh trial deployments with a monthly allocation, an AI token quota, purchased credits
 * and budgets, in organizations of their own or in one (the second then not the primary, so the API key
 * does not charge it, and both under the budgets of both).
 */
const terms = fc.record({
  // MODEL_SHARED_ORGANIZATION=0 keeps the two deployments in organizations of their own.
  sameOrganization: process.env.MODEL_SHARED_ORGANIZATION === '0' ? fc.constant(false) : fc.boolean(),
  // The second deployment made this much later: its billing anchor, so its credit periods, differ from
  // the first's (an organization-wide `period` budget follows the primary's, docs/budgets.md, Windows).
  secondLater: fc.constantFrom(0, 11 * DAY + 5 * 60 * MINUTE),
  deployments: fc.array(
    fc.record({
      monthly: fc.integer({ min: 0, max: 12 }),
      aiLimit: fc.constantFrom(0, 300, 2000),
      purchased: fc.integer({ min: 0, max: 20 }),
      budgets: fc.array(budget, { maxLength: 3 }),
    }),
    { minLength: 2, maxLength: 2 },
  ),
});

interface Chosen {
  sameOrganization: boolean;
  secondLater: number;
  deployments: Array<{ monthly: number; aiLimit: number; purchased: number; budgets: ChosenBudget[] }>;
}

async function setup({ sameOrganization, secondLater, deployments }: Chosen): Promise<{ model: World; real: Real }> {
  const real: Real = { h, tenants: [], tools };
  const model: World = { now: h.clock.now().getTime(), deps: [] };
  for (const [index, { monthly, aiLimit }] of deployments.entries()) {
    const shared = sameOrganization && index > 0;
    if (index > 0 && secondLater > 0) {
      await realAdvance(real, secondLater);
      model.now = h.clock.now().getTime();
    }
    let t: Tenant;
    if (shared) {
      const first = real.tenants[0]!;
      const { deployment } = await h.deps.db.transaction((tx) =>
        createDeployment(tx, h.ctx, { organizationId: first.organizationId, name: unique('model-second'), tier: 'trial', isPrimary: false }),
      );
      // No key of its own: the organization's key charges its primary deployment.
      t = { ...first, deploymentId: deployment.id, apiKey: '' };
    } else t = await createTenant(h, { tier: 'trial' });
    const res = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { monthly_credits: monthly, ai_tokens_limit: aiLimit },
    });
    expect(res.statusCode, res.body).toBe(200);
    real.tenants.push(t);
    const org = shared ? model.deps[0]!.org : { budgets: [], windows: new Map(), anchor: h.clock.now() };
    model.deps.push(M.newDeployment(h.clock.now(), monthly, aiLimit, { index, keyed: !shared, org }));
  }
  // The budgets, once both deployments exist (a budget may name either); fast-check may hand the same
  // objects to another run: the model's are its own.
  deployments.forEach(({ budgets }, index) => {
    for (const { narrow, ...b } of budgets) model.deps[index]!.org.budgets.push({ ...b, deployment: narrow ? index : null });
  });
  for (const [index, d] of model.deps.entries()) {
    if (model.deps.findIndex((x) => x.org === d.org) === index) await realCreateBudgets(real, index, d.org.budgets);
  }
  for (const [index, { purchased }] of deployments.entries()) {
    if (purchased > 0) {
      M.changePurchased(model.deps[index]!, model.now, purchased);
      expect((await realChangePurchased(real, index, purchased)).status).toBe(200);
    }
  }
  await compareState(model, real, 'setup');
  return { model, real };
}

function* permutations(n: number): Generator<number[]> {
  const a = Array.from({ length: n }, (_, i) => i);
  function* go(k: number): Generator<number[]> {
    if (k === n) yield [...a];
    for (let i = k; i < n; i++) {
      [a[k], a[i]] = [a[i]!, a[k]!];
      yield* go(k + 1);
      [a[k], a[i]] = [a[i]!, a[k]!];
    }
  }
  yield* go(0);
}


describe('the money engine against its model', () => {
  it(
    'every sequence of operations leaves the answers, balances and books the model predicts',
    async () => {
      await fc.assert(
        fc.asyncProperty(terms, commands, async (chosen, cmds) => {
          await fc.asyncModelRun(() => setup(chosen), cmds);
        }),
        { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }), ...(process.env.MODEL_PATH ? { path: process.env.MODEL_PATH } : {}) },
      );
    },
    Math.max(60_000, RUNS * 15_000),
  );
});
