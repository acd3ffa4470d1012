//! The Lua scripts: every change to a lock is one of these, run atomically
//! by Redis. Each takes `KEYS = [lock, queue, fence]`; the formats they write are
//! built and read on the Rust side in `wire.rs`.
//!
//! - lock key: `"<token> <owner>"`, with `PX ttl`;
//! - queue: a sorted set of waiter ids, scored by arrival (last score + 1);
//! - waiter record `<waiters><id>`: `"<hub> <f|u> <record ttl ms> <owner>"`
//!   with `PX <record ttl>`, a short TTL (three of the waiter's polls, see
//!   `core.rs`) refreshed at every poll; a waiter whose record expired is
//!   dead and is dropped when it reaches the head. A fair handoff grants the
//!   lock for the record TTL only: the grantee's confirming acquire renews it
//!   to the full TTL, so a handoff to a waiter that died since its last poll
//!   blocks the lock for a record TTL, not a lock TTL;
//! - the queue itself expires twice the record TTL after the last waiter's
//!   refresh, so dead waiters behind the head never keep it forever;
//! - fence: one counter per prefix, incremented at every grant (the
//!   fencing token).

use std::sync::LazyLock;

use redis::Script;

/// Shared helpers, prepended to every script.
const PRELUDE: &str = r"
local lock, queue, fence = KEYS[1], KEYS[2], KEYS[3]

-- Splits a lock value into its token and owner (nil, nil for none).
local function holder(value)
  if not value then return nil, nil end
  return string.match(value, '^(%d+) (.*)$')
end

-- The first waiter whose record is alive, dropping dead ones on the way.
local function head(waiters)
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then return nil, nil end
    local record = redis.call('GET', waiters .. first)
    if record then return first, record end
    redis.call('ZREM', queue, first)
  end
end

local function grant(owner, ttl)
  local token = redis.call('INCR', fence)
  redis.call('SET', lock, token .. ' ' .. owner, 'PX', ttl)
  return token
end

-- The lock is free: hand it to a fair head (it learns on its wake-up), or
-- wake an unfair head to try. Exactly one waiter hears of it. A handoff
-- lasts the head's record TTL (from its record) until the head confirms it
-- with an acquire, which renews it to the full TTL.
local function pass_on(waiters, wake)
  local id, record = head(waiters)
  if not id then return end
  local hub, mode, ttl, owner = string.match(record, '^(%S+) (%S+) (%S+) (.*)$')
  if mode == 'f' then
    grant(owner, ttl)
    redis.call('ZREM', queue, id)
    redis.call('DEL', waiters .. id)
  end
  redis.call('PUBLISH', wake .. hub, id)
end
";

/// Takes the lock if free (fair: and nobody queued ahead); otherwise joins
/// or stays in the queue (when `id` is not empty) and refreshes the waiter
/// record. A lock already handed to this owner is confirmed and its TTL
/// renewed.
///
/// `ARGV = [owner, ttl ms, f|u, id or "", waiters, wake, hub, record ttl ms,
/// joined]`, `joined` `1` when an earlier round of this attempt may have
/// queued `id` (on the first round there is nothing of it to remove);
/// returns `{1, token}` or `{0, pttl of the holder}`.
const ACQUIRE: &str = r"
local owner, ttl, mode, id, waiters, wake, hub, wttl, joined = unpack(ARGV)
local value = redis.call('GET', lock)
if value then
  local token, who = holder(value)
  if who == owner then
    redis.call('PEXPIRE', lock, ttl)
    return {1, tonumber(token)}
  end
else
  -- Unfair attempts take a free lock whoever is queued.
  local first = nil
  if mode == 'f' then first = head(waiters) end
  if not first or first == id then
    local token = grant(owner, ttl)
    if id ~= '' and joined == '1' then
      redis.call('ZREM', queue, id)
      redis.call('DEL', waiters .. id)
    end
    return {1, token}
  end
  -- Free, but someone queued first (the lock expired under a queue).
  pass_on(waiters, wake)
end
if id ~= '' then
  if not redis.call('ZSCORE', queue, id) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local score = 1
    if last[2] then score = tonumber(last[2]) + 1 end
    redis.call('ZADD', queue, score, id)
  end
  redis.call('SET', waiters .. id, hub .. ' ' .. mode .. ' ' .. wttl .. ' ' .. owner, 'PX', wttl)
  -- The queue outlives every live record (never shortened by a waiter
  -- with a shorter TTL), and goes when the last of them stops refreshing.
  local qttl = 2 * tonumber(wttl)
  if redis.call('PTTL', queue) < qttl then redis.call('PEXPIRE', queue, qttl) end
end
return {0, redis.call('PTTL', lock)}
";

/// Releases the lock if `owner` holds it and passes it on; never touches
/// another holder's key. `ARGV = [owner, waiters, wake]`; returns 1 if it
/// was held by `owner`.
const RELEASE: &str = r"
local owner, waiters, wake = unpack(ARGV)
local value = redis.call('GET', lock)
local _, who = holder(value)
if value and who ~= owner then return 0 end
if value then redis.call('DEL', lock) end
pass_on(waiters, wake)
if value then return 1 end
return 0
";

/// A waiter gives up: leaves the queue, and releases the lock if it was
/// handed over meanwhile. `ARGV = [owner, id, waiters, wake]`; returns 1 if
/// it released a lock.
const LEAVE: &str = r"
local owner, id, waiters, wake = unpack(ARGV)
local removed = redis.call('ZREM', queue, id)
redis.call('DEL', waiters .. id)
local value = redis.call('GET', lock)
if value then
  local _, who = holder(value)
  if who ~= owner then return 0 end
  redis.call('DEL', lock)
  pass_on(waiters, wake)
  return 1
end
if removed == 1 then pass_on(waiters, wake) end
return 0
";

/// The watchdog's extend: renews the TTL only if `owner` holds the lock.
/// `ARGV = [owner, ttl ms]`; returns 1 if extended.
const EXTEND: &str = r"
local _, who = holder(redis.call('GET', lock))
if who ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', lock, ARGV[2])
return 1
";

/// Redlock: raises this node's fence counter (and the lock's token) to the
/// token agreed on, while `owner` still holds the lock here.
/// `ARGV = [owner, token]`; returns 1 if raised. Keeps the key's TTL with
/// `PTTL` + `PX` (not `KEEPTTL`, which needs Redis 6).
const RAISE: &str = r"
local _, who = holder(redis.call('GET', lock))
if who ~= ARGV[1] then return 0 end
local pttl = redis.call('PTTL', lock)
if pttl <= 0 then return 0 end
if tonumber(redis.call('GET', fence) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', fence, ARGV[2])
end
redis.call('SET', lock, ARGV[2] .. ' ' .. ARGV[1], 'PX', pttl)
return 1
";

/// Reads one lock: `ARGV = [waiters]`; returns
/// `{lock value or '', pttl, id, record, id, record, ...}` with the live
/// waiters in queue order. Changes nothing.
const STATUS: &str = r"
local waiters = ARGV[1]
local out = {redis.call('GET', lock) or '', redis.call('PTTL', lock)}
for _, id in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local record = redis.call('GET', waiters .. id)
  if record then
    table.insert(out, id)
    table.insert(out, record)
  end
end
return out
";

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(ACQUIRE));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RELEASE));
pub(crate) static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(LEAVE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(EXTEND));
pub(crate) static RAISE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RAISE));
pub(crate) static STATUS_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(STATUS));
