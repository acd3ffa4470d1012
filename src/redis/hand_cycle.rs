//! The bench's floor row, "fairlock's scripts by hand" ([`HandCycle`]):
//! the locker's uncontended cycle, the same scripts with the same `KEYS`
//! and `ARGV` (`protocol/lock_args.rs`), sent from a bare connection.

use redis::ScriptInvocation;

use crate::Key;
use crate::redis::connect::node::invocation;
use crate::redis::protocol::keys::{LockKeys, owner_value, waiter_id};
use crate::redis::protocol::lock_args::{Joined, acquire_args, release_args};
use crate::redis::protocol::lock_lua::{ACQUIRE_SCRIPT, RELEASE_SCRIPT};
use crate::redis::state::{Core, record_ttl};

/// For the bench's floor row; not API. The acquire and release scripts of
/// one locker's uncontended `lock` + `unlock` on one key of a single node
/// (a server, or the master behind sentinels; on a cluster the keys are
/// hash-tagged as the locker's are), with the same `KEYS` and `ARGV` the
/// locker sends on its first round: one attempt's owner value and waiter
/// id (made once, reused by every cycle: the scripts cannot tell), the
/// locker's TTL, record TTL and wake-up hub. The caller sends them with
/// `invoke_async` (`EVALSHA`) on a connection of its own.
#[doc(hidden)]
pub struct HandCycle {
    keys: LockKeys,
    acquire: Vec<String>,
    owner: String,
}

impl HandCycle {
    /// The acquire script's call; its answer is `(1, token)` when granted.
    #[must_use]
    pub fn acquire(&self) -> ScriptInvocation<'static> {
        invocation(&ACQUIRE_SCRIPT, &self.keys.script_keys(), &self.acquire)
    }

    /// The release script's call for the grant of `token`; its answer is
    /// 1 when it released our lock.
    #[must_use]
    pub fn release(&self, token: i64) -> ScriptInvocation<'static> {
        let args = release_args(&self.owner, &self.keys, &token.to_string());
        invocation(&RELEASE_SCRIPT, &self.keys.script_keys(), &args)
    }

    /// The SHA1s of the acquire and release scripts, as `EVALSHA` names
    /// them.
    #[must_use]
    pub fn script_hashes() -> [&'static str; 2] {
        [ACQUIRE_SCRIPT.get_hash(), RELEASE_SCRIPT.get_hash()]
    }
}

impl HandCycle {
    /// The cycle of the locker whose state is `core` on `key`
    /// (`RedisLocker::hand_cycle`).
    pub(crate) fn new(core: &Core, key: &Key) -> Self {
        let keys = LockKeys::new(core.nodes.layout, core.config.prefix(), key);
        let id = waiter_id(core.fairness);
        let owner = owner_value(&id, &core.id);
        let acquire = acquire_args(
            &owner,
            &core.config.ttl_ms().to_string(),
            core.fairness,
            &id,
            &keys,
            &core.nodes.list[0].hub.id,
            &record_ttl(core.poll()).as_millis().to_string(),
            Joined::No,
            &core.config.data_loss_wait_ms(),
        );
        HandCycle {
            keys,
            acquire,
            owner,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::protocol::keys::Layout;
    use crate::semantics::fairness::Fairness;

    #[test]
    fn the_hand_cycle_sends_the_lockers_scripts() {
        // The same statics the attempt and the release run.
        assert_eq!(
            HandCycle::script_hashes(),
            [ACQUIRE_SCRIPT.get_hash(), RELEASE_SCRIPT.get_hash()]
        );
        let keys = LockKeys::new(Layout::Flat, "p:", &Key::from("a"));
        let args = acquire_args(
            "o",
            "10000",
            Fairness::Fair,
            "fx",
            &keys,
            "h",
            "3000",
            Joined::No,
            "10000",
        );
        assert_eq!(args.len(), 10);
        assert_eq!(args[8], "0");
        assert_eq!(args[9], "10000");
        assert_eq!(release_args("o", &keys, "7").len(), 4);
    }
}
