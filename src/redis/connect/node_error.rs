//! The Redis backend's own error: one failed request to one node,
//! classified by the Redis error kind and code (`failed_op.rs` maps an
//! operation that too few nodes answered into the public `Error`).

use std::fmt;
use std::time::Duration;

use crate::redis::protocol::epoch::is_epoch_key;
use crate::redis::protocol::keys::is_leader_record;

/// What went wrong with one request to one node.
#[derive(Debug)]
pub(crate) enum Failure {
    /// `NOAUTH`, `WRONGPASS`, or the client's failed `AUTH`: wrong or
    /// missing credentials.
    Auth(redis::RedisError),
    /// `NOPERM`: the ACL user may not run the command or touch the key.
    NoPerm(redis::RedisError),
    /// `WRONGTYPE`: a key under the prefix holds something fairlock did
    /// not write.
    WrongType(redis::RedisError),
    /// A script found data fairlock did not write in one of its keys
    /// (`FAIRLOCK_FOREIGN <slot> <other|string>`, see `lock_lua.rs`): `key`
    /// is `KEYS[slot]`, filled in by the node that ran the script.
    Foreign {
        slot: usize,
        found: String,
        key: String,
    },
    /// The mutex's acquire script found the key in use as a read/write
    /// lock or semaphore (`FAIRLOCK_SHARED`, see `line.rs`).
    Shared,
    /// Nothing listens at the node's address.
    Refused(redis::RedisError),
    /// Any other failure of the connection or the server's answer.
    Other(redis::RedisError),
    /// No answer within the timeout.
    NoAnswer(Duration),
    /// Fewer replicas than needed acknowledged the write within `within`
    /// (`WAIT`, see `durability.rs`): a failover could lose it, so its
    /// answer does not count.
    NotReplicated {
        acked: usize,
        needed: usize,
        within: Duration,
    },
    /// A failover of the master was announced while the request was under
    /// way (`sentinel.rs`): the answer may come from the old master.
    MasterChanged,
}

impl Failure {
    /// Classifies an error of the redis client.
    pub fn classify(error: redis::RedisError) -> Self {
        if error.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        {
            Failure::Auth(error)
        } else if error.code() == Some("NOPERM") {
            Failure::NoPerm(error)
        } else if error.code() == Some("WRONGTYPE") {
            Failure::WrongType(error)
        } else if error.code() == Some(SHARED_CODE) {
            Failure::Shared
        } else if let Some(foreign) = Failure::foreign(&error) {
            foreign
        } else if error.is_connection_refusal() {
            Failure::Refused(error)
        } else {
            Failure::Other(error)
        }
    }

    /// A script's `FAIRLOCK_FOREIGN <slot> <type> ...` error.
    fn foreign(error: &redis::RedisError) -> Option<Failure> {
        if error.code() != Some(FOREIGN_CODE) {
            return None;
        }
        let mut words = error.detail()?.split_whitespace();
        let slot = words.next()?.parse().ok()?;
        let found = words.next()?.to_owned();
        Some(Failure::Foreign {
            slot,
            found,
            key: String::new(),
        })
    }

    /// Whether retrying cannot help: wrong credentials, no permission, or
    /// data fairlock did not write.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Failure::Auth(_)
                | Failure::NoPerm(_)
                | Failure::WrongType(_)
                | Failure::Foreign { .. }
                | Failure::Shared
        )
    }
}

/// The error code of the scripts' "data fairlock did not write".
pub(crate) const FOREIGN_CODE: &str = "FAIRLOCK_FOREIGN";

/// The error code of the mutex's "the key is in use as a read/write lock
/// or semaphore".
const SHARED_CODE: &str = "FAIRLOCK_SHARED";

/// What fairlock keeps in `KEYS[slot]` of its scripts, named `key`.
fn expected(slot: usize, key: &str) -> &'static str {
    if is_leader_record(key) {
        return "an election's leader record (a string)";
    }
    if is_epoch_key(key) {
        return "the dataset's epoch (a server time in microseconds)";
    }
    match slot {
        1 => "the lock's value (a string)",
        2 => "the queue of waiters (a sorted set)",
        3 => "the prefix's fencing counter (a decimal integer below 2^53)",
        4 => "the line of a read/write lock or semaphore (a sorted set)",
        _ => "a key of fairlock's",
    }
}

/// A failed request to one node, named by its URL without password.
#[derive(Debug)]
pub(crate) struct NodeError {
    pub node: String,
    pub failure: Failure,
}

impl NodeError {
    pub fn new(node: &str, failure: Failure) -> Self {
        NodeError {
            node: node.to_owned(),
            failure,
        }
    }

    /// Names the key of a [`Failure::Foreign`] from the keys of the script
    /// that failed.
    pub fn name_key(mut self, keys: &[&str]) -> Self {
        if let Failure::Foreign { slot, key, .. } = &mut self.failure
            && let Some(name) = slot.checked_sub(1).and_then(|i| keys.get(i))
        {
            (*name).clone_into(key);
        }
        self
    }

    /// For a script over several locks (`lock_all_lua.rs`: `per` keys of
    /// each lock in turn, then the epoch), its key named already: the
    /// slot of a [`Failure::Foreign`] among its own lock's keys, which is
    /// what the message tells of it.
    pub fn slot_per_lock(mut self, per: usize) -> Self {
        if let Failure::Foreign { slot, .. } = &mut self.failure
            && *slot > 0
        {
            *slot = (*slot - 1) % per + 1;
        }
        self
    }

    /// The redis client's error behind this one, if any.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match &self.failure {
            Failure::Auth(e)
            | Failure::NoPerm(e)
            | Failure::WrongType(e)
            | Failure::Refused(e)
            | Failure::Other(e) => Some(e),
            Failure::NoAnswer(_)
            | Failure::Foreign { .. }
            | Failure::Shared
            | Failure::NotReplicated { .. }
            | Failure::MasterChanged => None,
        }
    }

    /// `true` when nothing listens at the node's address.
    pub fn is_refused(&self) -> bool {
        matches!(self.failure, Failure::Refused(_))
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            Failure::NoAnswer(after) => write!(f, "{}: no answer within {after:?}", self.node),
            Failure::Refused(_) => write!(f, "{}: connection refused", self.node),
            Failure::NotReplicated {
                acked,
                needed,
                within,
            } => write!(
                f,
                "{}: {acked} of the {needed} replicas needed acknowledged the write within \
                 {within:?}, so it does not count (a failover could lose it); see \
                 RedisConfig::with_replica_acks",
                self.node
            ),
            Failure::MasterChanged => write!(
                f,
                "{}: a failover of the master was announced while the request was under way, \
                 so its answer does not count",
                self.node
            ),
            Failure::Shared => write!(
                f,
                "{}: the key is in use as a read/write lock or semaphore",
                self.node
            ),
            Failure::Foreign { slot, found, key } => {
                let what = match found.as_str() {
                    "string" if *slot == 3 => "a value that is not a fencing counter".to_owned(),
                    "other" => "a value of another type".to_owned(),
                    found => format!("a {found}"),
                };
                write!(
                    f,
                    "{}: key '{key}' holds {what}, where fairlock keeps {}: fairlock did not \
                     write it. If nothing of yours uses it, remove it: redis-cli DEL '{key}'",
                    self.node,
                    expected(*slot, key),
                )?;
                if *slot == 3 {
                    write!(
                        f,
                        " (tokens then start again from 1; where a resource checks fencing \
                         tokens, SET it to a number above the last token it saw instead)"
                    )?;
                }
                Ok(())
            }
            Failure::WrongType(e) => write!(
                f,
                "{}: {e} (a key under the prefix holds a type fairlock does not write; \
                 `fairlock status` lists such keys)",
                self.node
            ),
            Failure::Auth(e) | Failure::NoPerm(e) | Failure::Other(e) => {
                write!(f, "{}: {e}", self.node)
            }
        }
    }
}

impl std::error::Error for NodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_code_and_kind() {
        let io = |kind| redis::RedisError::from(std::io::Error::from(kind));
        let refused = Failure::classify(io(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(refused, Failure::Refused(_)), "{refused:?}");
        let reset = Failure::classify(io(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(reset, Failure::Other(_)), "{reset:?}");
        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "auth"));
        assert!(matches!(Failure::classify(auth), Failure::Auth(_)));
    }
}
