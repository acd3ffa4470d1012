//! An operation that too few nodes answered, with each node's failure
//! (`node_error.rs`), and its mapping into the public [`Error`]: a refusal
//! (wrong credentials, no permission, data fairlock did not write) is
//! told as such, the rest as unavailable or failed.

use crate::redis::connect::node_error::{Failure, NodeError};
use crate::{BoxError, Error};

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
        let rest: Vec<NodeError> = errors.collect();
        let source: BoxError = if rest.is_empty() {
            first
        } else {
            Box::new(NodeFailures { first, rest })
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

/// The failures of the nodes of an operation that too few answered, told
/// in one line; kept by type, for [`is_unanswered`].
#[derive(Debug)]
struct NodeFailures {
    first: BoxError,
    rest: Vec<NodeError>,
}

impl std::fmt::Display for NodeFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.first)?;
        self.rest.iter().try_for_each(|e| write!(f, "; {e}"))
    }
}

impl std::error::Error for NodeFailures {}

/// Whether some node of the operation `e` reports got no answer in time
/// (and none refused it: see [`is_refusal`]): the node, or this process,
/// was busy, and the same request may pass when sent again.
pub(crate) fn is_unanswered(e: &Error) -> bool {
    let no_answer = |n: &NodeError| matches!(n.failure, Failure::NoAnswer(_));
    let no_answer_in = |source: &BoxError| match source.downcast_ref::<NodeFailures>() {
        Some(all) => {
            all.first.downcast_ref::<NodeError>().is_some_and(no_answer)
                || all.rest.iter().any(no_answer)
        }
        None => source.downcast_ref::<NodeError>().is_some_and(no_answer),
    };
    match e {
        Error::Backend { source, .. } | Error::Unavailable { source, .. } => {
            !is_refusal(e) && no_answer_in(source)
        }
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
    use std::time::Duration;

    use crate::redis::connect::node_error::FOREIGN_CODE;

    fn answer(text: &str) -> redis::RedisError {
        redis::RedisError::from((redis::ErrorKind::Client, "answer", text.to_owned()))
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
    fn a_node_that_did_not_answer_in_time_is_told_apart() {
        let node = |n: &str, failure| NodeError::new(n, failure);
        let slow = |n: &str| node(n, Failure::NoAnswer(Duration::from_millis(5)));
        let down = |n: &str| node(n, Failure::Refused(answer("refused")));
        let op = |total, errors| {
            Error::from(FailedOp {
                op: "lock",
                total,
                quorum: total / 2 + 1,
                errors,
            })
        };
        assert!(is_unanswered(&op(1, vec![slow("redis://a:1")])));
        assert!(!is_unanswered(&op(1, vec![down("redis://a:1")])));
        let redlock = op(3, vec![down("redis://a:1"), slow("redis://b:1")]);
        assert!(is_unanswered(&redlock), "{redlock:?}");
        let text = std::error::Error::source(&redlock).map(ToString::to_string);
        assert_eq!(
            text.as_deref(),
            Some("redis://a:1: connection refused; redis://b:1: no answer within 5ms")
        );
        let both_down = op(3, vec![down("redis://a:1"), down("redis://b:1")]);
        assert!(!is_unanswered(&both_down));
        let wrong = op(
            1,
            vec![node("redis://a:1", Failure::Auth(answer("WRONGPASS")))],
        );
        assert!(!is_unanswered(&wrong));
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
