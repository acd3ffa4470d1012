//! The `ARGV` of the mutex's two scripts of the uncontended cycle
//! (`lock_lua.rs`), built in one place for the locker (`attempt.rs`,
//! `held_lock.rs`) and for the bench's floor row (`hand_cycle.rs`).

use crate::redis::protocol::keys::{LockKeys, mode_tag};
use crate::semantics::fairness::Fairness;

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
    joined: bool,
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
        if joined { "1" } else { "0" }.into(),
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
