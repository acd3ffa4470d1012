//! The release of every key of one `lock_all` (`MultiGuard::unlock`) in
//! one script, so in one atomic step: a waiter for the same keys is
//! handed all of them at once, and nobody sees some released and others
//! not. It runs the release of `lock_lua.rs` for each key in turn, as the
//! function `release_one(ARGV)`: its helpers work on the lock whose keys
//! the loop pointed them at. Each key's answer is the one its own release
//! gives (0 to 3, see `lock_lua.rs`).
//!
//! `KEYS = [lock, queue, fence]` of each key in turn, then the epoch (one
//! per call, as for `lock_all_lua.rs`: on a cluster every key of a call
//! is in one slot). `ARGV = [owner, waiters, wake, token]` of each key in
//! turn (`lock_args::release_args`).

use std::sync::LazyLock;

use redis::Script;

use crate::redis::protocol::epoch::{EPOCH_READ_LUA, EPOCH_START_LUA};
use crate::redis::protocol::lock_lua::{HEAD, HEAD_KEYS, PRELUDE, RELEASE, RELEASE_FAST};

/// `KEYS` per lock of the script (lock, queue, fence).
const KEYS_PER_LOCK: usize = 3;

/// `ARGV` per lock of the script (`lock_args::release_args`).
const ARGS_PER_LOCK: usize = 4;

/// The loop over the keys, after the helpers and `release_one`.
const RELEASE_ALL: &str = r"
local out = {}
for k = 1, (#KEYS - 1) / 3 do
  local at, from = 3 * (k - 1), 4 * (k - 1)
  lock, queue, fence = KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]
  out[k] = release_one({unpack(ARGV, from + 1, from + 4)})
end
return out
";

pub(crate) static RELEASE_ALL_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HEAD_KEYS}{EPOCH_READ_LUA}{HEAD}{PRELUDE}{EPOCH_START_LUA}\n\
         local function release_one(ARGV)\n{RELEASE_FAST}{RELEASE}\nend\n\
         {RELEASE_ALL}"
    ))
});

/// The `KEYS` and `ARGV` of the script, from each lock's `[lock, queue,
/// fence, epoch]` (`LockKeys::script_keys`) and release `ARGV`, in turn.
/// `None` for no locks, or `ARGV` of another length.
pub(crate) fn keys_and_args(
    locks: &[([&str; 4], Vec<String>)],
) -> Option<(Vec<String>, Vec<String>)> {
    let ([.., epoch], _) = locks.first()?;
    let mut keys = Vec::with_capacity(KEYS_PER_LOCK * locks.len() + 1);
    let mut args = Vec::with_capacity(ARGS_PER_LOCK * locks.len());
    for (script_keys, release_args) in locks {
        if release_args.len() != ARGS_PER_LOCK {
            return None;
        }
        keys.extend(script_keys[..KEYS_PER_LOCK].iter().map(|k| (*k).to_owned()));
        args.extend(release_args.iter().cloned());
    }
    keys.push((*epoch).to_owned());
    Some((keys, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_args_name_each_lock_in_turn() {
        let a = (
            ["la", "qa", "fa", "e"],
            vec!["o".into(), "wa".into(), "k".into(), "1".into()],
        );
        let b = (
            ["lb", "qb", "fb", "e"],
            vec!["o".into(), "wb".into(), "k".into(), "".into()],
        );
        let (keys, args) = keys_and_args(&[a, b]).expect("two locks");
        assert_eq!(keys, ["la", "qa", "fa", "lb", "qb", "fb", "e"]);
        assert_eq!(args, ["o", "wa", "k", "1", "o", "wb", "k", ""]);
        assert!(keys_and_args(&[]).is_none());
        assert!(keys_and_args(&[(["l", "q", "f", "e"], vec![])]).is_none());
    }
}
