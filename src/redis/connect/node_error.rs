//! The Redis backend's own errors: one failed request to one node,
//! classified by the Redis error kind and code, and the mapping of a failed
//! operation (too few nodes answered) into the public [`Error`].

use std::fmt;
use std::time::Duration;

use crate::redis::protocol::epoch::is_epoch_key;
use crate::redis::protocol::keys::is_leader_record;
use crate::{BoxError, Error};

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
const FOREIGN_CODE: &str = "FAIRLOCK_FOREIGN";

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

/// An operation that too few nodes answered, with each failure.
pub(crate) struct FailedOp {
    pub op: &'static str,
    /// Nodes configured.
    pub total: usize,
    /// Nodes needed.
    pub quorum: usize,
    pub errors: Vec<NodeError>,
}

const AUTH_ADVICE: &str = "the user name or password is wrong, the user does not exist or is \
     disabled, or the server needs a password; check the URL's user:password, FAIRLOCK_USER \
     and FAIRLOCK_PASSWORD";

const NOPERM_ADVICE: &str = "the Redis ACL user may not run this command or touch these keys \
     or channels; grant it the commands, ~PREFIX* keys and &PREFIX* channels listed in \
     docs/production.md, \"Redis ACL users\"";

impl FailedOp {
    /// The public error for a refusal (wrong credentials, no permission,
    /// data fairlock did not write) among the failures, if there is one:
    /// retrying would not help.
    pub fn refusal(&mut self) -> Option<Error> {
        let at = self.errors.iter().position(|e| e.failure.is_refusal())?;
        let node = self.errors.swap_remove(at);
        let no_perm = matches!(node.failure, Failure::NoPerm(_));
        let auth = matches!(node.failure, Failure::Auth(_));
        let source: BoxError = Box::new(node);
        if !no_perm && !auth {
            return Some(Error::Backend {
                backend: "redis",
                op: self.op,
                source,
            });
        }
        Some(if no_perm {
            Error::PermissionDenied {
                backend: "redis",
                op: self.op,
                reason: NOPERM_ADVICE.into(),
                source,
            }
        } else {
            Error::Auth {
                backend: "redis",
                reason: AUTH_ADVICE.into(),
                source,
            }
        })
    }
}

impl From<FailedOp> for Error {
    /// A refusal as such; else the node's own error on a single instance,
    /// and a quorum error naming every failure on Redlock.
    fn from(mut failed: FailedOp) -> Error {
        if let Some(refusal) = failed.refusal() {
            return refusal;
        }
        let answered = failed.total - failed.errors.len();
        let mut errors = failed.errors.into_iter();
        let first: BoxError = match errors.next() {
            Some(e) => Box::new(e),
            None => "no node answered".into(),
        };
        if failed.total <= 1 {
            return Error::Backend {
                backend: "redis",
                op: failed.op,
                source: first,
            };
        }
        let rest: Vec<String> = errors.map(|e| e.to_string()).collect();
        let source = if rest.is_empty() {
            first
        } else {
            format!("{first}; {}", rest.join("; ")).into()
        };
        Error::Unavailable {
            backend: "redis",
            op: failed.op,
            answered,
            needed: failed.quorum,
            total: failed.total,
            source,
        }
    }
}

/// Whether `e` is a refusal (see [`FailedOp::refusal`]): retrying the
/// operation would not help.
pub(crate) fn is_refusal(e: &Error) -> bool {
    match e {
        Error::Auth { .. } | Error::PermissionDenied { .. } => true,
        Error::Backend { source, .. } => source
            .downcast_ref::<NodeError>()
            .is_some_and(|node| node.failure.is_refusal()),
        _ => false,
    }
}

/// Whether `e` says that a grant did not count because the replicas did
/// not acknowledge it in time, or because a failover was announced while
/// it was under way (the grant was given back: trying again may do).
pub(crate) fn is_replication_shortfall(e: &Error) -> bool {
    match e {
        Error::Backend { source, .. } => source.downcast_ref::<NodeError>().is_some_and(|node| {
            matches!(
                node.failure,
                Failure::NotReplicated { .. } | Failure::MasterChanged
            )
        }),
        _ => false,
    }
}

/// Whether `e` says that a mutex's key is in use as a read/write lock or
/// semaphore (which the caller turns into [`Error::InvalidKey`], naming
/// its key).
pub(crate) fn is_in_use_as_line(e: &Error) -> bool {
    match e {
        Error::Backend { source, .. } => source
            .downcast_ref::<NodeError>()
            .is_some_and(|node| matches!(node.failure, Failure::Shared)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> redis::RedisError {
        redis::RedisError::from((redis::ErrorKind::Client, "answer", text.to_owned()))
    }

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

    #[test]
    fn refusals_map_to_their_public_errors() {
        let failed = |failure| FailedOp {
            op: "lock",
            total: 1,
            quorum: 1,
            errors: vec![NodeError::new("redis://h:1", failure)],
        };
        let denied = Error::from(failed(Failure::NoPerm(answer("NOPERM"))));
        assert!(
            matches!(denied, Error::PermissionDenied { op: "lock", .. }),
            "{denied:?}"
        );
        let auth = Error::from(failed(Failure::Auth(answer("WRONGPASS"))));
        assert!(matches!(auth, Error::Auth { .. }), "{auth:?}");
        let slow = Error::from(failed(Failure::NoAnswer(Duration::from_millis(5))));
        assert!(
            matches!(slow, Error::Backend { op: "lock", .. }),
            "{slow:?}"
        );
    }

    #[test]
    fn foreign_data_is_a_refusal_naming_its_key() {
        let script = redis::make_extension_error(
            FOREIGN_CODE.to_owned(),
            Some("2 other script: 0123, on @user_script:9.".to_owned()),
        );
        let keys = ["p:a", "p:a/_OWNERS_/queue", "p:_OWNERS_/fence"];
        let node = NodeError::new("redis://h:1", Failure::classify(script)).name_key(&keys);
        let text = node.to_string();
        assert!(
            text.contains(
                "key 'p:a/_OWNERS_/queue' holds a value of another type, where fairlock keeps \
                 the queue"
            ) && text.ends_with("redis-cli DEL 'p:a/_OWNERS_/queue'"),
            "{text}"
        );
        let slow = NodeError::new("redis://b:1", Failure::NoAnswer(Duration::from_millis(5)));
        let err = Error::from(FailedOp {
            op: "lock",
            total: 3,
            quorum: 2,
            errors: vec![slow, node],
        });
        assert!(is_refusal(&err), "{err:?}");
        assert!(format!("{err:?}").contains("p:a/_OWNERS_/queue"), "{err:?}");
        let other = Error::from(FailedOp {
            op: "lock",
            total: 1,
            quorum: 1,
            errors: vec![NodeError::new(
                "redis://h:1",
                Failure::Other(answer("ERR x")),
            )],
        });
        assert!(!is_refusal(&other), "{other:?}");
    }

    #[test]
    fn redlock_failures_name_every_node() {
        let slow = |n: &str| NodeError::new(n, Failure::NoAnswer(Duration::from_millis(5)));
        let err = Error::from(FailedOp {
            op: "unlock",
            total: 3,
            quorum: 2,
            errors: vec![slow("redis://a:1"), slow("redis://b:1")],
        });
        let Error::Unavailable {
            answered, source, ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*answered, 1);
        let text = source.to_string();
        assert!(
            text.contains("redis://a:1") && text.contains("redis://b:1"),
            "{text}"
        );
    }
}
