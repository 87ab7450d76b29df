import { afterAll, describe, expect, it } from 'vitest';
import { ESTIMATOR_IDLE_MS, estimateStrength, estimatorRunning, setEstimatorIdleMs } from './password-strength.js';

/**
 * The estimator's worker ends when no check has come for a while and gives its memory back
 * (docs/operations-memory.md); the next check starts a new one and is answered as before.
 */
describe('the password estimator worker', () => {
  afterAll(() => setEstimatorIdleMs(ESTIMATOR_IDLE_MS));

  const until = async (what: string, done: () => boolean) => {
    for (const deadline = Date.now() + 10_000; !done(); ) {
      if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  it('ends after its idle time and starts again on the next check, with the same answers', async () => {
    setEstimatorIdleMs(100);
    const first = await estimateStrength('password1', []);
    expect(first).toMatchObject({ isCommon: true, score: 0 });
    const strong = await estimateStrength('violet-harbor-lantern-42', []);
    expect(strong.score).toBeGreaterThanOrEqual(3);
    expect(estimatorRunning()).toBe(true);
    await until('the idle worker ends', () => !estimatorRunning());
    // A check after the end starts a new worker and gets the same answer.
    expect(await estimateStrength('password1', [])).toEqual(first);
    expect(estimatorRunning()).toBe(true);
    await until('the idle worker ends again', () => !estimatorRunning());
  });

  it('stays while checks keep coming within its idle time, and answers checks made at once', async () => {
    setEstimatorIdleMs(1_000);
    const answers = await Promise.all(['password1', 'violet-harbor-lantern-42', 'qwerty'].map((p) => estimateStrength(p, [])));
    expect(answers.map((a) => a.isCommon)).toEqual([true, false, true]);
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 100));
      expect(estimatorRunning()).toBe(true);
      await estimateStrength(`ada.lovelace-${i}`, ['ada.lovelace@example.com']);
    }
    await until('the idle worker ends', () => !estimatorRunning());
  });
});
