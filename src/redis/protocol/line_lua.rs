//! The Lua text of the line's scripts (`ENTER`, `LEAVE`, `EXTEND`, and
//! the prelude they share), as `line.rs` specifies them.

use std::sync::LazyLock;

use redis::Script;

use crate::redis::protocol::epoch::{EPOCH_READ_LUA, EPOCH_START_LUA};

/// The keys, first in every script (the epoch, `KEYS[5]`, is read by
/// the epoch's helpers, `epoch.rs`).
const KEYS_LUA: &str = r"
local lock, queue, fence, line = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
";

/// Shared helpers, prepended to every script after the keys and the
/// epoch's.
const PRELUDE: &str = r"

local function failed(reply) return type(reply) == 'table' and reply.err ~= nil end

local function foreign(i, found)
  error({err = 'FAIRLOCK_FOREIGN ' .. i .. ' ' .. found})
end

-- Whether the line is absent or a sorted set.
local function line_ok() return not failed(redis.pcall('ZSCORE', line, '')) end

-- Whether INCR on the fencing counter gives a next token (as lock_lua.rs).
local function fence_ok()
  local v = redis.pcall('GET', fence)
  if failed(v) then return false end
  if not v then return true end
  if v ~= '0' and not string.match(v, '^[1-9]%d*$') then return false end
  return #v < 19 or (#v == 19 and v < '9223372036854775807')
end

-- The record of entry `id` if fairlock wrote it and it lives: a table of
-- its fields; nil otherwise.
local function entry(entries, id)
  local key = entries .. id
  local value = redis.pcall('GET', key)
  if not value or failed(value) or redis.call('PTTL', key) <= 0 then return nil end
  local kind, limit, n, hub, token, wttl, owner =
    string.match(value, '^([rws]) (%d+) ([1-9]%d*) (%S+) (%d+) ([1-9]%d*) (.*)$')
  if not kind or #limit > 9 or #n > 9 or #wttl > 9 then return nil end
  return {kind = kind, limit = tonumber(limit), n = tonumber(n), hub = hub,
    token = token, wttl = wttl, owner = owner}
end

-- Writes entry `id`'s record with PX `ttl`; the line lives at least as long.
local function store(entries, id, e, ttl)
  redis.call('SET', entries .. id, e.kind .. ' ' .. e.limit .. ' ' .. e.n .. ' ' .. e.hub ..
    ' ' .. e.token .. ' ' .. e.wttl .. ' ' .. e.owner, 'PX', ttl)
  if redis.call('PTTL', line) < tonumber(ttl) then redis.call('PEXPIRE', line, ttl) end
end

-- Whether an entry of `kind`, `limit`, `n` holds after the entries the
-- walk state `s` counted (crate::semantics::admission::Admission::next).
local function fits(s, kind, limit, n)
  if s.stopped then return false end
  if not s.head then return true end
  if kind ~= s.head or kind == 'w' or limit ~= s.limit then return false end
  return kind == 'r' or s.held + n <= s.limit
end

-- Walks the line from its head: drops dead entries, grants the entries
-- that hold and have no token (with the full `ttl` for `me`, their record
-- TTL for the others, who are woken), and stops at the first that does
-- not hold. Grants only with a fence that can count, from the epoch on.
local function walk(entries, wake, me, ttl)
  local s = {head = nil, limit = 0, held = 0, stopped = false, soonest = -1}
  if not line_ok() then return s end
  local grant = fence_ok() and epoch_ready()
  local pos = 0
  while not s.stopped do
    local ids = redis.call('ZRANGE', line, pos, pos + 31)
    if #ids == 0 then break end
    local dropped = 0
    for _, id in ipairs(ids) do
      local e = entry(entries, id)
      if not e then
        redis.call('ZREM', line, id)
        dropped = dropped + 1
      elseif fits(s, e.kind, e.limit, e.n) then
        if not s.head then s.head, s.limit = e.kind, e.limit end
        s.held = s.held + e.n
        if e.token == '0' and grant then
          e.token = string.format('%d', next_token())
          if id == me then
            store(entries, id, e, ttl)
          else
            store(entries, id, e, e.wttl)
            redis.call('PUBLISH', wake .. e.hub, id)
          end
        end
        local pttl = redis.call('PTTL', entries .. id)
        if id ~= me and (s.soonest < 0 or pttl < s.soonest) then s.soonest = pttl end
      else
        s.stopped = true
        break
      end
    end
    pos = pos + #ids - dropped
  end
  return s
end

local kinds = {r = 1, w = 2, s = 3}
";

/// Enters the line, or checks a waiter's place (see the module docs).
/// `ARGV = [id, kind, limit, n, owner, hub, ttl ms, record ttl ms,
/// entries, wake, try|join|check, data loss wait ms]`; replies as [`Entered::from_reply`]
/// reads (before the epoch, a waiter's WAIT is the time until it). Fails with `FAIRLOCK_FOREIGN` (before writing) for a line that
/// is not a sorted set, a fence that cannot count or an epoch fairlock did
/// not write.
const ENTER: &str = r"
local id, kind, limit, n, owner, hub, ttl, wttl, entries, wake, mode, loss_wait = unpack(ARGV)
limit, n = tonumber(limit), tonumber(n)
if not line_ok() then foreign(4, 'other') end
if not fence_ok() then
  if failed(redis.pcall('GET', fence)) then foreign(3, 'other') end
  foreign(3, 'string')
end
local ready, wait = epoch_start(loss_wait)
local function waiting(soonest)
  if ready then return {0, soonest} end
  return {0, wait}
end
if redis.call('ZSCORE', line, id) then
  local e = entry(entries, id)
  if not e then
    walk(entries, wake, '', ttl)
    return {-1}
  end
  if e.token ~= '0' then
    store(entries, id, e, ttl)
    return {1, tonumber(e.token)}
  end
  store(entries, id, e, wttl)
  local s = walk(entries, wake, id, ttl)
  e = entry(entries, id)
  if e and e.token ~= '0' then return {1, tonumber(e.token)} end
  return waiting(s.soonest)
end
if mode == 'check' then
  walk(entries, wake, '', ttl)
  return {-1}
end
-- PTTL -2: no such key (the minimal ACL (docs/production.md) grants no EXISTS).
if redis.call('PTTL', lock) ~= -2 or redis.call('PTTL', queue) ~= -2 then return {-2} end
local s = walk(entries, wake, '', ttl)
if s.head and ((s.head == 's') ~= (kind == 's') or (kind == 's' and s.limit ~= limit)) then
  return {-3, kinds[s.head], s.limit}
end
local e = {kind = kind, limit = limit, n = n, hub = hub, token = '0', wttl = wttl, owner = owner}
local holds = fits(s, kind, limit, n) and ready
if not holds and mode == 'try' then return waiting(s.soonest) end
local last = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')
local score = 1
if last[2] then score = tonumber(last[2]) + 1 end
redis.call('ZADD', line, score, id)
if holds then
  e.token = string.format('%d', next_token())
  store(entries, id, e, ttl)
  return {1, tonumber(e.token)}
end
store(entries, id, e, wttl)
return waiting(s.soonest)
";

/// Leaves the line (a release, or a waiter giving up) and grants whom
/// that admits. `ARGV = [id, entries, wake]`; returns 2 if the entry
/// held, 1 if it waited, 0 if it was gone.
const LEAVE: &str = r"
local id, entries, wake = unpack(ARGV)
if not line_ok() then return 0 end
local e = entry(entries, id)
local removed = redis.call('ZREM', line, id)
redis.call('DEL', entries .. id)
if removed == 0 then return 0 end
walk(entries, wake, '', '1')
if e and e.token ~= '0' then return 2 end
if e then return 1 end
return 0
";

/// The watchdog's extend: renews the record of a holder still in line.
/// `ARGV = [id, entries, ttl ms]`; returns 1 if extended.
const EXTEND: &str = r"
local id, entries, ttl = unpack(ARGV)
if not line_ok() or not redis.call('ZSCORE', line, id) then return 0 end
local e = entry(entries, id)
if not e or e.token == '0' then return 0 end
store(entries, id, e, ttl)
return 1
";

fn script(body: &str) -> Script {
    Script::new(&format!(
        "{KEYS_LUA}{EPOCH_READ_LUA}{PRELUDE}{EPOCH_START_LUA}{body}"
    ))
}

pub(crate) static ENTER_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(ENTER));
pub(crate) static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(LEAVE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(EXTEND));

/// The line's entries for `status`: `[id, record, id, record, ...]` in
/// line order, live records fairlock wrote only (`KEYS` as every line
/// script, `ARGV = [entries prefix]`; a line of another type reads as
/// empty).
const STATUS: &str = r"
local out = {}
if not line_ok() then return out end
for _, id in ipairs(redis.call('ZRANGE', line, 0, -1)) do
  local e = entry(ARGV[1], id)
  if e then
    table.insert(out, id)
    table.insert(out, redis.call('GET', ARGV[1] .. id))
  end
end
return out
";

pub(crate) static STATUS_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(STATUS));
