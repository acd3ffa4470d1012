//! The `ARGV` of the mutex's two scripts of the uncontended cycle
//! (`lock_lua.rs`), built in one place for the locker (`attempt.rs`,
//! `held_lock.rs`) and for the bench's floor row (`hand_cycle.rs`); and
//! the acquire's answer.

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

/// The acquire's answer on one node (see `lock_lua::ACQUIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AcquireReply {
    /// `1` granted, `0` busy, `2` a kept place lost.
    pub code: i64,
    /// The token when granted; when busy, the ms until the holder's key
    /// expires (or the epoch passes), negative for none.
    pub value: i64,
    /// When queued: how many may be queued, at most.
    pub queued: u64,
}

impl redis::FromRedisValue for AcquireReply {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match Vec::<i64>::from_redis_value(v)?[..] {
            [code, value] => Ok(AcquireReply {
                code,
                value,
                queued: 0,
            }),
            [code, value, queued] => Ok(AcquireReply {
                code,
                value,
                queued: u64::try_from(queued).unwrap_or(0),
            }),
            _ => Err("the acquire script answered with neither 2 nor 3 numbers".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::{FromRedisValue, Value};

    use super::AcquireReply;

    fn reply(numbers: &[i64]) -> Result<AcquireReply, redis::ParsingError> {
        AcquireReply::from_redis_value(Value::Array(
            numbers.iter().map(|&n| Value::Int(n)).collect(),
        ))
    }

    #[test]
    fn the_acquire_answer_reads_with_or_without_the_queue() {
        let granted = reply(&[1, 42]).expect("granted");
        assert_eq!((granted.code, granted.value, granted.queued), (1, 42, 0));
        let queued = reply(&[0, 1500, 10_000]).expect("queued");
        assert_eq!(
            (queued.code, queued.value, queued.queued),
            (0, 1500, 10_000)
        );
        assert_eq!(reply(&[0, -1, -3]).expect("odd count").queued, 0);
        assert!(reply(&[1]).is_err());
        assert!(reply(&[0, 1, 2, 3]).is_err());
    }
}
