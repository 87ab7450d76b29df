import { describe, expect, it } from 'vitest';
import { AppError } from '../errors.js';
import { BoundedGate } from './bounded-gate.js';

/** A job that runs until the test opens it. */
function held(): { job: () => Promise<void>; open: () => void; started: Promise<void> } {
  let open!: () => void;
  let markStarted!: () => void;
  const door = new Promise<void>((resolve) => {
    open = resolve;
  });
  const started = new Promise<void>((resolve) => {
    markStarted = resolve;
  });
  return {
    job: () => {
      markStarted();
      return door;
    },
    open,
    started,
  };
}

describe('BoundedGate', () => {
  it('runs N at once, queues M, refuses the next with 429 and Retry-After, and drains in order', async () => {
    const gate = new BoundedGate(2, 3, 'hashes');
    const jobs = Array.from({ length: 5 }, () => held());
    const runs = jobs.map((j) => gate.run(j.job));
    await Promise.all([jobs[0]!.started, jobs[1]!.started]);
    expect(gate.load).toEqual({ running: 2, waiting: 3 });

    const refused = await gate.run(async () => 'never').catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AppError);
    expect((refused as AppError).code).toBe('RATE_LIMITED');
    expect(Number((refused as AppError).headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(gate.load).toEqual({ running: 2, waiting: 3 });

    // The first finished job hands its slot to the first waiter: still two running, never three.
    jobs[0]!.open();
    await jobs[2]!.started;
    expect(gate.load).toEqual({ running: 2, waiting: 2 });
    // A newcomer queues behind the waiters instead of taking a slot.
    const late = held();
    const lateRun = gate.run(late.job);
    expect(gate.load).toEqual({ running: 2, waiting: 3 });

    for (const j of jobs) j.open();
    late.open();
    await Promise.all([...runs, lateRun]);
    expect(gate.load).toEqual({ running: 0, waiting: 0 });
    expect(await gate.run(async () => 'after')).toBe('after');
  });

  it('frees the slot when a job throws', async () => {
    const gate = new BoundedGate(1, 0, 'hashes');
    await expect(gate.run(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(gate.load).toEqual({ running: 0, waiting: 0 });
    expect(await gate.run(async () => 1)).toBe(1);
  });
});
