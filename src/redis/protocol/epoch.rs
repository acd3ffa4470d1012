//! The epoch of a dataset: how the scripts tell a Redis that lost
//! fairlock's data from one that never had it, and keep tokens growing
//! across such a loss.
//!
//! # Spec
//! The epoch key holds a server time in microseconds (`TIME`), written once
//! and never deleted:
//! - flat layout (one instance, sentinels, Redlock's masters):
//!   `<prefix>_OWNERS_/epoch`, one per prefix, beside the prefix's
//!   fencing counter;
//! - cluster: `<prefix>_OWNERS_/epoch/{<n>}`, one per hash slot, `n` the
//!   smallest number whose text hashes to the slot of the lock's own tag,
//!   so that a script of that lock may touch it.
//!
//! It is always the last of a script's `KEYS`. The rules, in Lua below:
//! - **No grant before the epoch.** A script grants (a fresh lock, a
//!   handoff, a line entry admitted) only where the epoch exists and the
//!   server's clock has reached it; otherwise the caller is told to wait
//!   until then.
//! - **A missing epoch is created by the next acquire or line entry**:
//!   as the server time plus the data loss wait
//!   ([`RedisConfig::with_data_loss_wait`](crate::redis::RedisConfig::with_data_loss_wait))
//!   when the fencing counter is missing too: the dataset is new, or lost
//!   its data (a restart without persistence, `FLUSHALL`, a failover to a
//!   replica that lacked them) while locks granted before may still be
//!   held; they all expire within the wait. Where the counter exists, an
//!   older fairlock wrote it and nothing was lost: the epoch is the
//!   server time, and grants go on at once. Handoffs in a release never
//!   create it (they wake the waiter, whose acquire does).
//! - **Tokens count on from the epoch.** A fencing counter that is
//!   missing when a grant increments it is set to the epoch first. Every
//!   token given before a loss was given by a counter that started at an
//!   earlier epoch (or at 0) and grew by one per grant, slower than the
//!   clock's microseconds, so the new tokens are above all of them (the
//!   server's clock must not go back across the loss). A server time in
//!   microseconds stays below 2^53, where Lua stops counting exactly,
//!   until the year 2255.
//!
//! Cost on the steady path: a `GET` of the epoch and a `TIME` per grant,
//! inside the script that grants.

use crate::RESERVED_SEGMENT;

/// The epoch's helpers that a script's fast path uses (`fence` is the
/// fencing counter's key); see the module docs.
pub(crate) const EPOCH_READ_LUA: &str = r"
local epoch_key = KEYS[#KEYS]
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The epoch: a number; nil when absent; false when the key holds
-- something fairlock did not write.
local function epoch_read()
  local v = redis.pcall('GET', epoch_key)
  if not v then return nil end
  if type(v) ~= 'string' or not string.match(v, '^[1-9]%d*$') or #v > 16
      or (#v == 16 and v > '9007199254740991') then
    return false
  end
  return tonumber(v)
end
-- Whether grants may be made: the epoch exists and the clock reached it.
local function epoch_ready()
  local e = epoch_read()
  return e and now_us() >= e
end
-- The next fencing token; a counter that was missing counts from the epoch.
local function next_token()
  local token = redis.call('INCR', fence)
  if token == 1 then
    local e = epoch_read()
    if e then
      token = e + 1
      redis.call('SET', fence, string.format('%d', token))
    end
  end
  return token
end
";

/// Creating a missing epoch (needs `foreign`, from the script's prelude):
/// returns whether grants may be made now, and if not the ms to wait.
pub(crate) const EPOCH_START_LUA: &str = r"
local function epoch_start(wait_ms)
  local e = epoch_read()
  if e == false then foreign(#KEYS, 'other') end
  local now = now_us()
  if not e then
    e = now
    if not redis.pcall('GET', fence) then e = now + tonumber(wait_ms) * 1000 end
    redis.call('SET', epoch_key, string.format('%d', e))
  end
  if now >= e then return true, 0 end
  return false, math.floor((e - now) / 1000) + 1
end
";

/// `true` if Redis key `name` is an epoch key.
pub(crate) fn is_epoch_key(name: &str) -> bool {
    let at = format!("{RESERVED_SEGMENT}/epoch");
    name.ends_with(&at) || name.contains(&format!("{at}/{{"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_keys_are_told_apart() {
        assert!(is_epoch_key("p:_OWNERS_/epoch"));
        assert!(is_epoch_key("p:_OWNERS_/epoch/{1234}"));
        assert!(!is_epoch_key("p:_OWNERS_/fence"));
        assert!(!is_epoch_key("p:jobs/epoch"));
    }
}
