//! The Lua scripts: every change to a lock is one of these, run atomically
//! by Redis. Each takes `KEYS = [lock, queue, fence, epoch]`; the formats they write are
//! built and read on the Rust side in `keys.rs`, the epoch's rules are
//! `epoch.rs`'s.
//!
//! - lock key: `"<token> <owner>"`, with `PX ttl`;
//! - queue: a sorted set of waiter ids, scored by arrival (last score + 1);
//! - waiter record `<waiters><id>`: `"<hub> <f|u> <record ttl ms> <owner>"`
//!   with `PX <record ttl>`, a short TTL (three of the waiter's polls, see
//!   `state.rs`) refreshed at every poll; a waiter whose record expired is
//!   dead and is dropped when it reaches the head. A fair handoff grants the
//!   lock for the record TTL only: the grantee's confirming acquire renews it
//!   to the full TTL, so a handoff to a waiter that died since its last poll
//!   blocks the lock for a record TTL, not a lock TTL;
//! - the queue itself expires twice the record TTL after the last waiter's
//!   refresh, so dead waiters behind the head never keep it forever;
//! - fence: one counter per prefix, incremented at every grant (the
//!   fencing token), counting from the epoch where it was missing;
//! - epoch: nothing is granted before it (`epoch.rs`).
//!
//! The acquire and the release start with a fast path for the uncontended
//! cycle (a free lock, nobody queued, nothing foreign), written before the
//! helpers that only the general path needs: Redis runs a script's body
//! anew each time, local function definitions included.
//!
//! Anything under the prefix may have been written by someone else. A
//! lock value that does not parse is someone else's lock; a queue member
//! without a live record fairlock wrote, or scored above 2^52, is dropped
//! from the queue (its own keys are left alone). A lock, queue or fence key of another type, or a
//! fence that cannot count, makes an acquire fail before it writes
//! anything, with the error `FAIRLOCK_FOREIGN <i> <other|string>` naming
//! `KEYS[i]` (`string`: a fence that is a string but cannot count); the other scripts treat such a lock key as someone else's
//! and such a queue as empty, so a holder can always release.

use std::sync::LazyLock;

use redis::Script;

use crate::redis::protocol::epoch::{EPOCH_READ_LUA, EPOCH_START_LUA};

/// What every script starts with: the keys, and the helpers that the fast
/// paths (see [`script`]) use too.
pub(crate) const HEAD_KEYS: &str = r"
local lock, queue, fence = KEYS[1], KEYS[2], KEYS[3]
";

/// The helpers after the keys and the epoch's (`epoch.rs`).
pub(crate) const HEAD: &str = r"

-- Keys are read with the commands the minimal ACL (docs/production.md) grants (no
-- TYPE): a key of another type answers GET or ZSCORE with an error.
local function failed(reply) return type(reply) == 'table' and reply.err ~= nil end

-- Whether INCR on the fencing counter gives a next token that Lua holds
-- exactly: absent, or a decimal below 2^53 (a Lua number is a double, so
-- past 2^53 two grants could read the same token).
local function fence_ok()
  local v = redis.pcall('GET', fence)
  if failed(v) then return false end
  if not v then return true end
  if v ~= '0' and not string.match(v, '^[1-9]%d*$') then return false end
  return #v < 16 or (#v == 16 and v < '9007199254740992')
end

-- The token is written with '%d': Lua writes a number of 15 digits or
-- more as '1e+14', a value no holder would recognise as its own.
local function grant(owner, ttl)
  local token = next_token()
  redis.call('SET', lock, string.format('%d', token) .. ' ' .. owner, 'PX', ttl)
  return token
end
";

/// The other shared helpers, defined after a script's fast path: a script
/// defines its local functions anew on every run, which costs Redis about
/// as much as the uncontended cycle's own commands.
pub(crate) const PRELUDE: &str = r"

-- Fails the script naming KEYS[i] and the type found there, for a key
-- that holds data fairlock did not write (the Rust side names the key).
local function foreign(i, found)
  error({err = 'FAIRLOCK_FOREIGN ' .. i .. ' ' .. found})
end

-- The lock's value; nil when free, false when the key holds another type
-- (someone else's data: never read, overwritten or passed on).
local function lock_value()
  local value = redis.pcall('GET', lock)
  if failed(value) then return false end
  return value or nil
end

-- Whether the queue is absent or a sorted set.
local function queue_ok() return not failed(redis.pcall('ZSCORE', queue, '')) end

-- Splits a lock value into its token and owner (nil, nil for none).
local function holder(value)
  if not value then return nil, nil end
  return string.match(value, '^(%d+) (.*)$')
end

-- Fails naming the first of lock, queue and fence that holds data
-- fairlock did not write, before anything is written; else returns the
-- lock's value (nil when free).
local function check_keys()
  local value = lock_value()
  if value == false then foreign(1, 'other') end
  if not queue_ok() then foreign(2, 'other') end
  if not fence_ok() then
    if failed(redis.pcall('GET', fence)) then foreign(3, 'other') end
    foreign(3, 'string')
  end
  return value
end

-- The fields of the waiter record at `key` if fairlock wrote it: a string
-- with a TTL, `<hub> <f|u> <record ttl ms> <owner>`. Otherwise nil, and
-- whether something else is there.
local function record(key)
  local value = redis.pcall('GET', key)
  if not value then return nil, false end
  if not failed(value) and redis.call('PTTL', key) > 0 then
    local hub, mode, ttl, owner = string.match(value, '^(%S+) ([fu]) ([1-9]%d*) (.*)$')
    if hub and #ttl <= 9 then return {hub, mode, ttl, owner}, true end
  end
  return nil, true
end

-- Arrivals count from 1: members scored above 2^52 are not fairlock's (and
-- adding 1 to such a score would not order a newcomer after it).
local max_score = 4503599627370496
local function drop_odd_scores()
  while true do
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    if not last[2] or tonumber(last[2]) <= max_score then return end
    redis.call('ZREM', queue, last[1])
  end
end

-- The first waiter of the queue with a live fairlock record, dropping from
-- the queue the members with odd scores and those before it (dead waiters,
-- and members someone else added; their keys are left alone). Nothing when
-- the queue is not a sorted set: no fairlock waiter can be in it.
local function head(waiters)
  if not queue_ok() then return nil end
  drop_odd_scores()
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then return nil end
    local fields = record(waiters .. first)
    if fields then return first, fields end
    redis.call('ZREM', queue, first)
  end
end

-- The lock is free: hand it to a fair head (it learns on its wake-up), or
-- wake an unfair head to try. Exactly one waiter hears of it. A handoff
-- lasts the head's record TTL (from its record) until the head confirms it
-- with an acquire, which renews it to the full TTL. With a fencing counter
-- that cannot count, a fair head is only woken: its acquire names the key;
-- before the epoch (or without one) too: its acquire waits or starts it.
local function pass_on(waiters, wake)
  local id, fields = head(waiters)
  if not id then return end
  local hub, mode, ttl, owner = unpack(fields)
  if mode == 'f' and fence_ok() and epoch_ready() then
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
/// joined, data loss wait ms]`, `joined` `1` when an earlier round of this attempt may have
/// queued `id` (on the first round, `0`, there is nothing of it to remove),
/// `2` for a place `lock_all` keeps (`lock_args::Joined`): its entry
/// found missing is not made again;
/// returns `{1, token}` or `{0, ms}`: the pttl of the holder, or before
/// the epoch the time until it; `{0, ms, n}` for a waiter, `n` how many
/// may be queued (the span of the queue's scores, first to last: an upper
/// bound; the minimal ACL has no `ZCARD`), by which long queues spread
/// their polls (`state.rs`); `{2, 0}` for a kept place found missing
/// (the lock not granted, nothing written). Read by `lock_args::AcquireReply`.
/// Fails with
/// `FAIRLOCK_SHARED` while the key's line exists (`line.rs`).
///
/// Its fast path grants a free lock, as the general path would, when no
/// key holds data fairlock did not write and no earlier round left
/// anything to remove: `GET` finds no lock, no line of a read/write lock
/// or semaphore exists (`PTTL` -2), `ZRANGE` finds nobody queued (fair)
/// or no key of another type (unfair: a free lock is taken whoever is
/// queued), the fencing counter counts, and the epoch has passed.
pub(crate) const ACQUIRE_FAST: &str = r"
do
  local mode, id, joined = ARGV[3], ARGV[4], ARGV[9]
  if (id == '' or joined == '0') and not redis.pcall('GET', lock)
      and redis.call('PTTL', lock .. '/_OWNERS_/line') == -2 then
    local first = redis.pcall('ZRANGE', queue, 0, 0)
    if first.err == nil and (mode == 'u' or first[1] == nil) and fence_ok()
        and epoch_ready() then
      return {1, grant(ARGV[1], ARGV[2])}
    end
  end
end
";

/// The general path of the acquire.
pub(crate) const ACQUIRE: &str = r"
local owner, ttl, mode, id, waiters, wake, hub, wttl, joined, loss_wait = unpack(ARGV)
local value = check_keys()
-- A key in use as a read/write lock or semaphore (its line, `line.rs`)
-- has no mutex: refused before anything is written.
-- (PTTL, not EXISTS: the minimal ACL (docs/production.md) grants no EXISTS.)
if redis.call('PTTL', lock .. '/_OWNERS_/line') ~= -2 then error({err = 'FAIRLOCK_SHARED'}) end
local ready, wait = epoch_start(loss_wait)
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
  if ready and (not first or first == id) then
    local token = grant(owner, ttl)
    if id ~= '' and joined ~= '0' then
      redis.call('ZREM', queue, id)
      redis.call('DEL', waiters .. id)
    end
    return {1, token}
  end
  -- Free, but someone queued first (the lock expired under a queue).
  if ready then pass_on(waiters, wake) end
end
if id ~= '' then
  if not redis.call('ZSCORE', queue, id) then
    if joined == '2' then return {2, 0} end
    drop_odd_scores()
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
if not ready then return {0, wait} end
if id == '' then return {0, redis.call('PTTL', lock)} end
local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
local span = 0
if first[2] and last[2] then span = tonumber(last[2]) - tonumber(first[2]) + 1 end
return {0, redis.call('PTTL', lock), span}
";

/// Releases the lock if `owner` holds it and passes it on; never touches
/// another holder's key. `ARGV = [owner, waiters, wake, token]`, `token`
/// the one this node gave `owner` (or `''`). Returns 1 if it was held by
/// `owner`; 0 if the lock key is gone; 2 if a later grant holds it (a
/// fairlock value with a greater token: this node's counter only grows);
/// 3 if it holds anything else (someone else wrote it).
///
/// Its fast path deletes the key when it holds exactly what this node's
/// grant wrote (`mine` and `owner`) and answers at once when nobody is
/// queued (or the queue holds another type: no fairlock waiter is in it);
/// when someone is, the general path passes the lock on (`released`).
pub(crate) const RELEASE_FAST: &str = r"
local released = false
do
  local owner, mine = ARGV[1], ARGV[4]
  if mine ~= '' and redis.pcall('GET', lock) == mine .. ' ' .. owner then
    redis.call('DEL', lock)
    local first = redis.pcall('ZRANGE', queue, 0, 0)
    if first.err ~= nil or first[1] == nil then return 1 end
    released = true
  end
end
";

/// The general path of the release.
pub(crate) const RELEASE: &str = r"
local owner, waiters, wake, mine = unpack(ARGV)
if released then
  pass_on(waiters, wake)
  return 1
end
local value = lock_value()
if value == false then return 3 end
local token, who = holder(value)
if value and who ~= owner then
  if token and tonumber(token) > (tonumber(mine or '') or 0) then return 2 end
  return 3
end
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
local removed = 0
if queue_ok() then removed = redis.call('ZREM', queue, id) end
redis.call('DEL', waiters .. id)
local value = lock_value()
if value == false then return 0 end
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
local _, who = holder(lock_value())
if who ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', lock, ARGV[2])
return 1
";

/// Redlock: raises this node's fence counter (and the lock's token) to the
/// token agreed on, while `owner` still holds the lock here.
/// `ARGV = [owner, token]`; returns 1 if raised. Keeps the key's TTL with
/// `PTTL` + `PX` (not `KEEPTTL`, which needs Redis 6).
const RAISE: &str = r"
local _, who = holder(lock_value())
if who ~= ARGV[1] or not fence_ok() then return 0 end
local pttl = redis.call('PTTL', lock)
if pttl <= 0 then return 0 end
if tonumber(redis.call('GET', fence) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', fence, ARGV[2])
end
redis.call('SET', lock, ARGV[2] .. ' ' .. ARGV[1], 'PX', pttl)
return 1
";

/// Reads one lock: `ARGV = [waiters]`; returns `{lock value or '', pttl,
/// lock, queue, fence, tag, id, record, tag, id, record, ...}`: `lock` is
/// `''` (no key), `string` or `other` (another type); `queue` and `fence`
/// are `''` for keys fairlock could have written, else `other` (another
/// type; for the fence also a string that cannot count);
/// then the queue in order, tag `w` for a live waiter with its record, tag
/// `x` (and an empty record) for a member whose record fairlock did not
/// write or whose score it would not give. Changes nothing.
const STATUS: &str = r"
local waiters = ARGV[1]
local function state(ok) if ok then return '' end return 'other' end
local value = lock_value()
local lock_state = 'other'
if value == nil then lock_state = '' elseif value then lock_state = 'string' end
local out = {value or '', redis.call('PTTL', lock), lock_state, state(queue_ok()),
  state(fence_ok())}
if queue_ok() then
  local members = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local id = members[i]
    local fields, found = record(waiters .. id)
    if tonumber(members[i + 1]) > max_score then fields = nil end
    if fields then
      table.insert(out, 'w')
      table.insert(out, id)
      table.insert(out, table.concat(fields, ' '))
    elseif found then
      table.insert(out, 'x')
      table.insert(out, id)
      table.insert(out, '')
    end
  end
end
return out
";

/// What the release script found on one node (its answer, 0 to 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock key is gone (0).
    Gone,
    /// It was ours, and is released (1).
    Ours,
    /// A later grant holds it (2).
    LaterGrant,
    /// It holds anything else (3).
    Other,
}

impl Released {
    pub fn from_answer(answer: i64) -> Self {
        match answer {
            0 => Released::Gone,
            1 => Released::Ours,
            2 => Released::LaterGrant,
            _ => Released::Other,
        }
    }
}

/// A script: the head, its fast path (commands only, before the other
/// helpers are defined; it returns, or falls through to the general path,
/// which decides every case alike), the prelude, and its body.
fn script(fast: &str, body: &str) -> Script {
    Script::new(&format!(
        "{HEAD_KEYS}{EPOCH_READ_LUA}{HEAD}{fast}{PRELUDE}{EPOCH_START_LUA}{body}"
    ))
}

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(ACQUIRE_FAST, ACQUIRE));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script(RELEASE_FAST, RELEASE));
pub(crate) static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script("", LEAVE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| script("", EXTEND));
pub(crate) static RAISE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script("", RAISE));
pub(crate) static STATUS_SCRIPT: LazyLock<Script> = LazyLock::new(|| script("", STATUS));
