import type { Observed, WindowSpec } from './rate-windows.js';

/**
 * One script per request: every window is read and checked; only when all admit (and the call is not a
 * peek) is each counted. Time comes from Redis TIME unless the caller passes it (tests with a moved
 * clock). ARGV: now | 'TIME', peek (0/1), nonce, then per window limit, window ms, kind.
 *   kind 'c' (counter): one hash, b = bucket index, c = current count, p = previous count; PEXPIRE 2 W.
 *   kind 'l' (log): one sorted set of admitted hits scored by time (member = time:nonce, unique per
 *   call); entries at or before now − W are removed first; PEXPIRE W after an add.
 * Returns {now, allowed, then three numbers per window}: a counter's prev, curr, 0; a log's count,
 * oldest time, and the time at rank count − limit (−1 for none), all after the decision.
 */
export const SLIDING_WINDOW_SCRIPT = `
local now = tonumber(ARGV[1]) -- 'TIME': take Redis's own clock
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local peek = ARGV[2] == '1'
local member = now .. ':' .. ARGV[3]
local n = #KEYS
local a, b, bucket = {}, {}, {}
local allowed = 1
for i = 1, n do
  local limit = tonumber(ARGV[1 + 3 * i])
  local w = tonumber(ARGV[2 + 3 * i])
  if ARGV[3 + 3 * i] == 'l' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - w)
    a[i] = redis.call('ZCARD', KEYS[i])
    if a[i] + 1 > limit then allowed = 0 end
  else
    local bk = math.floor(now / w)
    local stored = redis.call('HMGET', KEYS[i], 'b', 'c', 'p')
    local sb, sc, sp = tonumber(stored[1]), tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
    local p, c = 0, 0
    if sb == bk then p, c = sp, sc elseif sb == bk - 1 then p, c = sc, 0 end
    a[i], b[i], bucket[i] = p, c, bk
    local elapsed = now - bk * w
    if p * (w - elapsed) + (c + 1) * w > limit * w then allowed = 0 end
  end
end
local out = {now, allowed}
for i = 1, n do
  local limit = tonumber(ARGV[1 + 3 * i])
  local w = tonumber(ARGV[2 + 3 * i])
  if ARGV[3 + 3 * i] == 'l' then
    if allowed == 1 and not peek then
      redis.call('ZADD', KEYS[i], now, member)
      redis.call('PEXPIRE', KEYS[i], w)
      a[i] = a[i] + 1
    end
    local oldest, needed = -1, -1
    if a[i] > 0 then oldest = tonumber(redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')[2]) end
    if limit >= 1 and a[i] >= limit then
      local r = a[i] - limit
      needed = tonumber(redis.call('ZRANGE', KEYS[i], r, r, 'WITHSCORES')[2])
    end
    out[#out + 1] = a[i]
    out[#out + 1] = oldest
    out[#out + 1] = needed
  else
    if allowed == 1 and not peek then
      b[i] = b[i] + 1
      redis.call('HSET', KEYS[i], 'b', bucket[i], 'c', b[i], 'p', a[i])
      redis.call('PEXPIRE', KEYS[i], 2 * w)
    end
    out[#out + 1] = a[i]
    out[#out + 1] = b[i]
    out[#out + 1] = 0
  end
end
return out`;

/** Each window's state from the script's reply (−1 = none), in the order the windows were passed. */
export function observedFromReply(specs: WindowSpec[], reply: number[]): Observed[] {
  return specs.map((s, i): Observed => {
    const [x, y, z] = [Number(reply[2 + 3 * i]), Number(reply[3 + 3 * i]), Number(reply[4 + 3 * i])];
    if (!s.exact) return { kind: 'counter', counts: { prev: x, curr: y } };
    return { kind: 'log', counts: { count: x, oldest: y < 0 ? null : y, needed: z < 0 ? null : z } };
  });
}
