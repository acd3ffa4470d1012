//! The `ARGV` of the mutex's two scripts of the uncontended cycle
//! (`lock_lua.rs`), built in one place for the locker (`attempt.rs`,
//! `held_lock.rs`) and for the bench's floor row (`hand_cycle.rs`).

use crate::redis::protocol::keys::{LockKeys, mode_tag};
use crate::semantics::fairness::Fairness;

/// What an acquire round knows of its waiter's queue entry: the script's
/// `joined` argument (see `lock_lua.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Joined {
    /// `0`: the attempt's first round; nothing of it is queued yet.
    No,
    /// `1`: an earlier round may have queued it; an entry found missing
    /// is made again, at the end of the queue.
    Yes,
    /// `2`: queued by `lock_all`'s one step, a place the waiter keeps or
    /// loses: an entry found missing is not made again (the answer says
    /// so), since a place at the end would no longer be in the order of
    /// the call's other places (`lock/all_keys.rs`).
    Kept,
}

impl Joined {
    /// The script's argument.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Joined::No => "0",
            Joined::Yes => "1",
            Joined::Kept => "2",
        }
    }
}

/// The acquire script's `ARGV` (see `lock_lua.rs`): `[owner, ttl ms, f|u,
/// id or "", waiters, wake, hub, record ttl ms, joined, data loss wait ms]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire_args(
    owner: &str,
    ttl_ms: &str,
    fairness: Fairness,
    id: &str,
    keys: &LockKeys,
    hub: &str,
    record_ms: &str,
    joined: Joined,
    loss_wait_ms: &str,
) -> Vec<String> {
    vec![
        owner.to_owned(),
        ttl_ms.to_owned(),
        mode_tag(fairness).into(),
        id.to_owned(),
        keys.waiters.clone(),
        keys.wake.clone(),
        hub.to_owned(),
        record_ms.to_owned(),
        joined.arg().into(),
        loss_wait_ms.to_owned(),
    ]
}

/// The release script's `ARGV`: `[owner, waiters, wake, token]`, `token`
/// the one the node gave `owner` (`""` for none).
pub(crate) fn release_args(owner: &str, keys: &LockKeys, token: &str) -> Vec<String> {
    vec![
        owner.to_owned(),
        keys.waiters.clone(),
        keys.wake.clone(),
        token.to_owned(),
    ]
}
