import type { Queryable } from '../../db/client.js';

/** An expiring grant of purchased credits (table credit_grants). */
export interface Lot {
  id: string;
  amount: number;
  remaining: number;
  consumed_mark: number;
  expires_at: Date;
  created_at: Date;
}

/**
 * What is left of each lot after the purchased spending up to `consumedNow`: spending since a lot's
 * mark is attributed to the lots that existed then, soonest expiry first; what they cannot cover came
 * from credits that never expire. Pure, so the rule is testable on its own.
 */
export function settleLots(lots: Lot[], consumedNow: number): Map<string, number> {
  const ordered = [...lots].sort(
    (a, b) => a.consumed_mark - b.consumed_mark || a.created_at.getTime() - b.created_at.getTime(),
  );
  const remaining = new Map<string, number>();
  const active: Lot[] = [];
  let position = ordered[0]?.consumed_mark ?? consumedNow;
  const spend = (amount: number) => {
    let left = amount;
    for (const lot of [...active].sort((a, b) => a.expires_at.getTime() - b.expires_at.getTime())) {
      if (left <= 0) break;
      const take = Math.min(remaining.get(lot.id)!, left);
      remaining.set(lot.id, remaining.get(lot.id)! - take);
      left -= take;
    }
  };
  for (const lot of ordered) {
    if (lot.consumed_mark > position) {
      spend(lot.consumed_mark - position);
      position = lot.consumed_mark;
    }
    active.push(lot);
    remaining.set(lot.id, lot.remaining);
  }
  if (consumedNow > position) spend(consumedNow - position);
  return remaining;
}

/**
 * Expire the lots due at `now` (inside the caller's transaction, balance row already locked): settles
 * every open lot, marks the due ones expired and returns the credits that lapse with them, the next
 * expiry still ahead (for sync_before) and the lots still open after it (locked, as now stored).
 */
export async function expireDueLots(
  tx: Queryable,
  deploymentId: string,
  consumedNow: number,
  now: Date,
  held = 0,
): Promise<{ expired: number; nextExpiry: Date | null; open: Lot[] }> {
  const lots = await tx.query<Lot>(
    `SELECT id, amount, remaining, consumed_mark, expires_at, created_at FROM credit_grants
     WHERE deployment_id = $1 AND expired_at IS NULL FOR UPDATE`,
    [deploymentId],
  );
  if (lots.length === 0) return { expired: 0, nextExpiry: null, open: [] };
  const due = lots.filter((l) => l.expires_at.getTime() <= now.getTime());
  const future = lots.filter((l) => l.expires_at.getTime() > now.getTime());
  const nextExpiry = future.reduce<Date | null>((min, l) => (min === null || l.expires_at < min ? l.expires_at : min), null);
  if (due.length === 0) return { expired: 0, nextExpiry, open: lots };
  const settled = settleLots(lots, consumedNow);
  // What `held` purchased credits of open holds will take when spent, attributed as spending is
  // (soonest expiry first): that much of a due lot does not lapse yet. The lot stays open with it, is
  // spent first when the holds are recorded, and lapses with what is left once none holds it (a
  // released hold), at the next sync, which comes at once (nextExpiry: now).
  const afterHolds = held > 0 ? settleLots(lots, consumedNow + held) : settled;
  let expired = 0;
  let kept = false;
  const open: Lot[] = [];
  for (const lot of lots) {
    const left = settled.get(lot.id)!;
    const isDue = lot.expires_at.getTime() <= now.getTime();
    const lapses = isDue ? afterHolds.get(lot.id)! : 0;
    const keep = isDue ? left - lapses : 0;
    expired += lapses;
    kept ||= keep > 0;
    const remaining = keep > 0 ? keep : left;
    const closes = isDue && keep === 0;
    await tx.query(
      'UPDATE credit_grants SET remaining = $2, consumed_mark = $3, expired_at = $4 WHERE id = $1',
      [lot.id, remaining, consumedNow, closes ? now : null],
    );
    if (!closes) open.push({ ...lot, remaining, consumed_mark: consumedNow });
  }
  return { expired, nextExpiry: kept ? now : nextExpiry, open };
}

/** Soonest expiry first; of two expiring together, the older grant first. */
const byExpiry = (a: Lot, b: Lot) => a.expires_at.getTime() - b.expires_at.getTime() || a.created_at.getTime() - b.created_at.getTime();

/**
 * The purchased credits that never expire: `purchased` less what the open lots, settled at
 * `consumedNow`, still hold. Never below 0.
 */
export function permanentCredits(purchased: number, lots: Lot[], consumedNow: number): number {
  if (lots.length === 0) return Math.max(0, purchased);
  let inLots = 0;
  for (const left of settleLots(lots, consumedNow).values()) inLots += left;
  return Math.max(0, purchased - inLots);
}

/**
 * How much of a removal of `amount` purchased credits (a take-back of money that went back, an
 * operator's negative adjustment) comes out of the open lots: what the credits that never expire
 * cannot cover (docs/metering.md, Expiring grants). The caller advances `purchased_consumed` by it,
 * so the lots give it up as spending takes them, soonest expiry first.
 */
export function takenFromLots(amount: number, purchased: number, lots: Lot[], consumedNow: number): number {
  return Math.max(0, Math.min(amount, purchased) - permanentCredits(purchased, lots, consumedNow));
}

/**
 * A refund's purchased credits given back to the open lots settled at `consumedNow`: soonest expiry
 * first, each up to its original amount. Returns each lot's remaining after it and what the lots took;
 * the rest comes back as credits that never expire (docs/metering.md, Expiring grants). Pure.
 */
export function refillLots(lots: Lot[], consumedNow: number, amount: number, chargedAt: Date): { remaining: Map<string, number>; taken: number } {
  const remaining = settleLots(lots, consumedNow);
  let left = Math.max(0, amount);
  for (const lot of [...lots].sort(byExpiry)) {
    if (left <= 0) break;
    // A grant made after the charge did not pay for it.
    if (lot.created_at.getTime() > chargedAt.getTime()) continue;
    const give = Math.min(left, lot.amount - remaining.get(lot.id)!);
    if (give <= 0) continue;
    remaining.set(lot.id, remaining.get(lot.id)! + give);
    left -= give;
  }
  return { remaining, taken: Math.max(0, amount) - left };
}

/**
 * Give a refund's `amount` purchased credits back to the open lots (inside the caller's transaction,
 * balance row locked, `lots` the open lots it locked: syncBalanceLots): every open lot is settled at
 * `consumedNow` and written with its new remaining and mark, as expireDueLots does. Returns what the
 * lots took. No lots, no statement: a deployment without expiring grants pays nothing for this.
 */
export async function refundToLots(tx: Queryable, lots: Lot[], consumedNow: number, amount: number, chargedAt: Date): Promise<number> {
  if (lots.length === 0 || amount <= 0) return 0;
  const { remaining, taken } = refillLots(lots, consumedNow, amount, chargedAt);
  for (const lot of lots) {
    await tx.query('UPDATE credit_grants SET remaining = $2, consumed_mark = $3 WHERE id = $1', [lot.id, remaining.get(lot.id)!, consumedNow]);
  }
  return taken;
}
