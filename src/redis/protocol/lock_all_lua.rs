//! The scripts of `lock_all` and `try_lock_all` (`lock/all_keys.rs`):
//! every key of one call in one script, so in one atomic step (Redis runs
//! no other client's command while a script runs). They are built from
//! the helpers of `lock_lua.rs`, and run its acquire for each key as the
//! function `acquire_one(ARGV)`: the helpers work on the lock whose keys
//! `use(k)` pointed them at.
//!
//! `KEYS = [lock, queue, fence]` of each key of the call in turn, then
//! the epoch: one for the whole call (the prefix's; on a cluster the
//! slot's, and every key of a call is in one slot).
//! `ARGV = [ttl ms, f|u, wake, hub, record ttl ms, data loss wait ms,
//! joined]`, then `[owner, id or "", waiters]` of each key in turn.
//!
//! A script's error does not undo what it wrote, so both first check
//! every key (`check_all`) and write nothing when one is refused: data
//! fairlock did not write fails the script as the acquire does
//! (`FAIRLOCK_FOREIGN <i>`, `KEYS[i]` of this script), a key in use as a
//! read/write lock or semaphore answers `{-1, k}` (the `k`th key).
//!
//! ```text
//! ENQUEUE ALL   (fair lock_all's step) the acquire of each key in turn:
//!               taken if free with nobody queued, else queued behind
//!               the waiters there; {taken, token or ms} per key
//! TAKE ALL      (try_lock_all, each round of unfair lock_all) every key
//!               taken if each is free for a newcomer (fair: and nobody
//!               queued), else none: {1, token per key}, or {0, ms}
//! ```
//!
//! A grant of an earlier round of the same call (its answer lost) counts
//! as taken, renewed. Unfair `lock_all` keeps one queue entry while it
//! waits (its id, the same for every key), in the queue of a key someone
//! else holds, so that the release of that key wakes it: TAKE ALL moves
//! it there (leaving the queue it was in, which is served on as a leaving
//! waiter's is), and removes it when it takes the keys. It never keeps an
//! entry in the queue of a free key past the round that found it free,
//! nor holds a key while it waits.

use std::sync::LazyLock;

use redis::Script;

use crate::redis::protocol::epoch::{EPOCH_READ_LUA, EPOCH_START_LUA};
use crate::redis::protocol::keys::LockKeys;
use crate::redis::protocol::lock_args::Joined;
use crate::redis::protocol::lock_lua::{ACQUIRE, ACQUIRE_FAST, HEAD, HEAD_KEYS, PRELUDE};
use crate::semantics::fairness::Fairness;

/// What both scripts define after the helpers of `lock_lua.rs`.
const OVER_LOCKS: &str = r"
local parts = (#KEYS - 1) / 3
local ttl, mode, wake, hub, wttl, loss_wait, joined = unpack(ARGV, 1, 7)

-- Points the helpers at the keys of the k-th lock; returns its owner, id
-- and waiters prefix.
local function use(k)
  local at = 3 * (k - 1)
  lock, queue, fence = KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]
  return ARGV[8 + at], ARGV[9 + at], ARGV[10 + at]
end

-- Every key checked before anything is written: fails naming the first
-- key that holds data fairlock did not write; returns the first lock in
-- use as a read/write lock or semaphore, or nil.
local function check_all()
  for k = 1, parts do
    use(k)
    local at = 3 * (k - 1)
    if lock_value() == false then foreign(at + 1, 'other') end
    if not queue_ok() then foreign(at + 2, 'other') end
    if not fence_ok() then
      if failed(redis.pcall('GET', fence)) then foreign(at + 3, 'other') end
      foreign(at + 3, 'string')
    end
  end
  if epoch_read() == false then foreign(#KEYS, 'other') end
  for k = 1, parts do
    use(k)
    if redis.call('PTTL', lock .. '/_OWNERS_/line') ~= -2 then return k end
  end
  return nil
end

-- The acquire of the k-th lock, as `lock_lua.rs` runs it.
local function acquire_at(k, how)
  local owner, id, waiters = use(k)
  return acquire_one({owner, ttl, mode, id, waiters, wake, hub, wttl, how, loss_wait})
end

local in_use = check_all()
if in_use then return {-1, in_use} end
";

/// Fair `lock_all`'s one step: the acquire of every key in turn.
const ENQUEUE_ALL: &str = r"
local out = {}
for k = 1, parts do
  local answer = acquire_at(k, joined)
  out[2 * k - 1], out[2 * k] = answer[1], answer[2]
end
return out
";

/// `try_lock_all`, and each round of unfair `lock_all` (with an id).
const TAKE_ALL: &str = r"
local ready, wait = epoch_start(loss_wait)
-- Per lock: the token of a grant of this call found (an answer lost),
-- else whether a newcomer may take it; `held`: the first lock someone
-- else holds.
local tokens, free, held = {}, true, nil
for k = 1, parts do
  local owner, id, waiters = use(k)
  local value = lock_value()
  local token, who = holder(value)
  if value and who == owner then
    tokens[k] = tonumber(token)
  elseif value then
    free, held = false, held or k
  elseif mode == 'f' then
    local first = head(waiters)
    if first and first ~= id then free = false end
  end
end
if free and ready then
  local out = {1}
  for k = 1, parts do
    local owner, id, waiters = use(k)
    if tokens[k] then
      redis.call('PEXPIRE', lock, ttl)
    else
      tokens[k] = grant(owner, ttl)
    end
    if id ~= '' then
      redis.call('ZREM', queue, id)
      redis.call('DEL', waiters .. id)
    end
    out[k + 1] = tokens[k]
  end
  return out
end
-- Not all: none held. Grants of this call found go back, and a free lock
-- with someone queued (fair) is served, as a release or try_lock would.
for k = 1, parts do
  local owner, id, waiters = use(k)
  if tokens[k] then
    redis.call('DEL', lock)
    pass_on(waiters, wake)
  elseif ready and mode == 'f' and not lock_value() then
    pass_on(waiters, wake)
  end
end
local _, call_id = use(1)
if call_id ~= '' then
  -- The waiter's one entry: where it is, while someone else holds that
  -- lock; else in the queue of the first lock someone else holds.
  local at = nil
  for k = 1, parts do
    use(k)
    if redis.call('ZSCORE', queue, call_id) then at = k end
  end
  local target = held
  if at then
    use(at)
    if lock_value() then target = at end
  end
  if at and at ~= target then
    local _, id, waiters = use(at)
    redis.call('ZREM', queue, id)
    redis.call('DEL', waiters .. id)
    if not lock_value() then pass_on(waiters, wake) end
  end
  if target then
    -- Its answer without the queue's span (the call's rounds do not
    -- spread their polls by it).
    local answer = acquire_at(target, '1')
    return {answer[1], answer[2]}
  end
end
if not ready then return {0, wait} end
if held then
  use(held)
  return {0, redis.call('PTTL', lock)}
end
return {0, -1}
";

/// A script over several locks: the helpers, the acquire as the function
/// `acquire_one(ARGV)`, [`OVER_LOCKS`], and `body`.
fn over_locks(body: &str) -> Script {
    Script::new(&format!(
        "{HEAD_KEYS}{EPOCH_READ_LUA}{HEAD}{PRELUDE}{EPOCH_START_LUA}\n\
         local function acquire_one(ARGV)\n{ACQUIRE_FAST}{ACQUIRE}\nend\n\
         {OVER_LOCKS}{body}"
    ))
}

pub(crate) static ENQUEUE_ALL_SCRIPT: LazyLock<Script> = LazyLock::new(|| over_locks(ENQUEUE_ALL));
pub(crate) static TAKE_ALL_SCRIPT: LazyLock<Script> = LazyLock::new(|| over_locks(TAKE_ALL));

/// One key of a call, as the scripts name it.
pub(crate) struct Part<'a> {
    pub keys: &'a LockKeys,
    pub owner: &'a str,
    /// Its waiter id, or `""` for none.
    pub id: &'a str,
}

/// What is the same for every key of a call.
pub(crate) struct Shared<'a> {
    pub ttl_ms: &'a str,
    pub fairness: Fairness,
    pub hub: &'a str,
    pub record_ms: &'a str,
    pub loss_wait_ms: &'a str,
    pub joined: Joined,
}

/// The `KEYS` and `ARGV` of a call over `parts` (at least one).
pub(crate) fn keys_and_args(parts: &[Part<'_>], shared: &Shared<'_>) -> (Vec<String>, Vec<String>) {
    let mut keys = Vec::with_capacity(3 * parts.len() + 1);
    let mut args = vec![
        shared.ttl_ms.to_owned(),
        crate::redis::protocol::keys::mode_tag(shared.fairness).to_owned(),
        parts[0].keys.wake.clone(),
        shared.hub.to_owned(),
        shared.record_ms.to_owned(),
        shared.loss_wait_ms.to_owned(),
        shared.joined.arg().to_owned(),
    ];
    for part in parts {
        keys.extend([
            part.keys.lock.clone(),
            part.keys.queue.clone(),
            part.keys.fence.clone(),
        ]);
        args.extend([
            part.owner.to_owned(),
            part.id.to_owned(),
            part.keys.waiters.clone(),
        ]);
    }
    keys.push(parts[0].keys.epoch.clone());
    (keys, args)
}

/// What an answer of either script says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllAnswer {
    /// ENQUEUE ALL: per key, the token if taken, else the ms its holder
    /// (or the epoch) has left (negative: none known).
    Each(Vec<Result<u64, i64>>),
    /// TAKE ALL: every key taken, with its token.
    Taken(Vec<u64>),
    /// TAKE ALL: none taken; the ms the lock waited for (or the epoch) has
    /// left (negative: none known).
    Busy(i64),
    /// Nothing written: the key at this index is in use as a read/write
    /// lock or semaphore.
    InUseAsLine(usize),
    /// Neither script answers this.
    Unexpected,
}

/// Reads the answer of ENQUEUE ALL (`enqueue`) or TAKE ALL for `n` keys.
pub(crate) fn read(answer: &[i64], n: usize, enqueue: bool) -> AllAnswer {
    let token = |t: i64| u64::try_from(t).unwrap_or_default();
    match answer {
        [-1, k] => usize::try_from(*k - 1)
            .ok()
            .filter(|i| *i < n)
            .map_or(AllAnswer::Unexpected, AllAnswer::InUseAsLine),
        each if enqueue && each.len() == 2 * n => AllAnswer::Each(
            each.chunks(2)
                .map(|pair| match pair {
                    [1, t] => Ok(token(*t)),
                    [_, ms] => Err(*ms),
                    _ => Err(-1),
                })
                .collect(),
        ),
        [1, tokens @ ..] if !enqueue && tokens.len() == n => {
            AllAnswer::Taken(tokens.iter().map(|t| token(*t)).collect())
        }
        [0, ms] if !enqueue => AllAnswer::Busy(*ms),
        _ => AllAnswer::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;
    use crate::redis::protocol::keys::Layout;

    #[test]
    fn keys_and_args_name_each_lock_in_turn() {
        let (a, b) = (Key::from("a"), Key::from("b"));
        let ka = LockKeys::new(Layout::Flat, "p:", &a);
        let kb = LockKeys::new(Layout::Flat, "p:", &b);
        let parts = [
            Part {
                keys: &ka,
                owner: "oa",
                id: "fa",
            },
            Part {
                keys: &kb,
                owner: "ob",
                id: "fb",
            },
        ];
        let shared = Shared {
            ttl_ms: "10000",
            fairness: Fairness::Fair,
            hub: "h",
            record_ms: "3000",
            loss_wait_ms: "0",
            joined: Joined::No,
        };
        let (keys, args) = keys_and_args(&parts, &shared);
        assert_eq!(
            keys,
            [
                "p:a",
                "p:a/_OWNERS_/queue",
                "p:_OWNERS_/fence",
                "p:b",
                "p:b/_OWNERS_/queue",
                "p:_OWNERS_/fence",
                "p:_OWNERS_/epoch"
            ]
        );
        assert_eq!(
            args[..7],
            ["10000", "f", "p:_OWNERS_/wake/", "h", "3000", "0", "0"]
        );
        assert_eq!(
            args[7..],
            ["oa", "fa", "p:a/_OWNERS_/w/", "ob", "fb", "p:b/_OWNERS_/w/"]
        );
    }

    #[test]
    fn answers_are_read() {
        assert_eq!(
            read(&[1, 7, 0, 900], 2, true),
            AllAnswer::Each(vec![Ok(7), Err(900)])
        );
        assert_eq!(read(&[1, 7, 8], 2, false), AllAnswer::Taken(vec![7, 8]));
        assert_eq!(read(&[0, 900], 2, false), AllAnswer::Busy(900));
        assert_eq!(read(&[-1, 2], 2, true), AllAnswer::InUseAsLine(1));
        assert_eq!(read(&[-1, 3], 2, false), AllAnswer::Unexpected);
        assert_eq!(read(&[1, 7], 2, false), AllAnswer::Unexpected);
        assert_eq!(read(&[1, 7], 2, true), AllAnswer::Unexpected);
    }
}
