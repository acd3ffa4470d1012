//! The etcd backend's private error: what went wrong on the wire, told
//! apart by type and gRPC status code, and mapped into the public
//! [`crate::Error`] by `From` where it leaves the backend.

use std::borrow::Cow;
use std::time::Duration;

use tonic::Code;

use super::secure;
use crate::{Error, Key};

/// The result of an etcd backend step.
pub(crate) type EtcdResult<T> = std::result::Result<T, EtcdError>;

/// What failed in the etcd backend.
#[derive(Debug)]
pub(crate) enum EtcdError {
    /// etcd answered `op` with an error, or could not be reached for it.
    Request {
        op: &'static str,
        source: etcd_client::Error,
    },
    /// `op` got no answer within `after`.
    NoAnswer { op: &'static str, after: Duration },
    /// `op` failed for a reason fairlock found itself (a watch that ended,
    /// an answer in an unexpected shape, a queue that kept changing).
    Failed {
        op: &'static str,
        why: Cow<'static, str>,
    },
    /// A fresh lease none of whose renewals counted (see `session/renewal.rs`)
    /// before its local deadline, `within` after it was asked for: it was
    /// not used, and expires in etcd.
    Unconfirmed { id: i64, within: Duration },
    /// An outcome the caller sees as is (lock or session lost, timeout,
    /// cancellation, bad key).
    Public(Error),
}

/// Why a waiter fails with [`Error::SessionLost`]: its lease lapsed here.
pub(crate) const LEASE_LOST: &str = "the session lease could not be renewed for a whole TTL";
/// Why a waiter fails with [`Error::SessionLost`]: its entry is gone.
pub(crate) const ENTRY_GONE: &str =
    "its queue entry vanished (its session lease expired or someone deleted it)";

impl EtcdError {
    /// `true` if the request may pass when sent again: no answer in time,
    /// a connection that failed, or a member that is down, has no leader
    /// or lost it (etcd's "unavailable"). Such a request may also have
    /// been applied anyway.
    pub fn is_transient(&self) -> bool {
        match self {
            EtcdError::NoAnswer { .. } | EtcdError::Unconfirmed { .. } => true,
            EtcdError::Request { source, .. } => is_transient(source),
            _ => false,
        }
    }

    /// `true` for an answer from an etcd server (such as "no leader"), as
    /// opposed to a failure to reach one.
    pub fn is_server_answer(&self) -> bool {
        matches!(self, EtcdError::Request { source, .. } if is_server_answer(source))
    }

    /// `true` if etcd answered that the lease does not exist (it expired
    /// or was revoked): gRPC code "not found".
    pub fn is_lease_not_found(&self) -> bool {
        matches!(self, EtcdError::Request {
            source: etcd_client::Error::GRpcStatus(status), ..
        } if status.code() == Code::NotFound)
    }

    /// `true` if etcd refused the request: credentials not accepted, or a
    /// permission the user's role lacks (see [`secure::refusal`]).
    pub fn is_refusal(&self) -> bool {
        matches!(self, EtcdError::Request { source, .. } if secure::refusal(source).is_some())
    }

    /// `true` if etcd itself refused the request as a whole before
    /// applying any of it: a bad request (too large, a lease it does not
    /// have), credentials or a permission missing, or etcd out of space
    /// (it refuses a txn that puts; one that only deletes passes).
    pub fn is_refused_before_applying(&self) -> bool {
        self.is_no_space()
            || matches!(self, EtcdError::Request {
                source: source @ etcd_client::Error::GRpcStatus(status), ..
            } if is_server_answer(source) && matches!(
                status.code(),
                Code::InvalidArgument
                    | Code::NotFound
                    | Code::PermissionDenied
                    | Code::FailedPrecondition
                    | Code::Unauthenticated
            ))
    }

    /// `true` for [`Error::Timeout`] and [`Error::Cancelled`]: the caller
    /// gave up.
    pub fn is_gave_up(&self) -> bool {
        matches!(self, EtcdError::Public(e) if e.is_gave_up())
    }

    /// `true` for [`Error::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, EtcdError::Public(Error::LockLost { .. }))
    }

    /// [`Error::SessionLost`] of the caller's `key`, for `reason` (often
    /// [`LEASE_LOST`] or [`ENTRY_GONE`]): the mutex's and the line's
    /// waiters alike.
    pub fn session_lost(key: &Key, reason: &str) -> EtcdError {
        EtcdError::Public(Error::SessionLost {
            key: key.to_string(),
            reason: reason.to_owned(),
        })
    }

    /// `true` for [`Error::SessionLost`].
    pub fn is_session_lost(&self) -> bool {
        matches!(self, EtcdError::Public(Error::SessionLost { .. }))
    }

    /// `true` if etcd refused a write because it is out of space (see
    /// [`is_no_space`]).
    pub fn is_no_space(&self) -> bool {
        matches!(self, EtcdError::Request { source, .. } if is_no_space(source))
    }
}

/// etcd's answer to a write (a put, a txn that puts, a lease grant) while
/// its NOSPACE alarm is raised: its database reached `--quota-backend-bytes`.
/// gRPC calls that "resource exhausted", as it does etcd's "too many
/// requests", which passes by itself; this does not, so it is told apart by
/// etcd's message.
const NO_SPACE: &str = "database space exceeded";

/// `true` if `err` is etcd refusing a write for lack of space: no use
/// sending it again until an operator frees space.
pub(crate) fn is_no_space(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status)
        if status.code() == Code::ResourceExhausted
            && status.message().contains(NO_SPACE))
}

/// What the caller is told when etcd is out of space.
#[derive(Debug, thiserror::Error)]
#[error(
    "etcd is out of space and refuses writes (its NOSPACE alarm is raised: the database \
     reached --quota-backend-bytes, 2 GiB by default). Free space, then clear the alarm: \
     `etcdctl compact <current revision>`, `etcdctl defrag`, `etcdctl alarm disarm`; run etcd \
     with --auto-compaction-retention so that it does not fill up again ({0})"
)]
struct NoSpace(etcd_client::Error);

/// [`EtcdError::is_transient`] for an etcd-client error.
pub(crate) fn is_transient(err: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match err {
        E::TransportError(_) | E::IoError(_) => true,
        E::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Cancelled
                    | Code::Unknown
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Aborted
                    | Code::Unavailable
            ) && !is_no_space(err)
        }
        _ => false,
    }
}

/// [`EtcdError::is_server_answer`] for an etcd-client error: a status
/// that no transport failure caused.
pub(crate) fn is_server_answer(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status)
        if std::error::Error::source(status).is_none())
}

/// `true` if `err` failed because the endpoint refused the connection
/// (nothing listens there): an I/O error of that kind in its causes.
pub(crate) fn is_connection_refused(err: &etcd_client::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match err {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(e) => Some(e),
        etcd_client::Error::IoError(e) => Some(e),
        _ => None,
    };
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A request got no answer within the request timeout.
#[derive(Debug, thiserror::Error)]
#[error("no answer within the request timeout of {0:?}")]
struct NoAnswer(Duration);

impl From<Error> for EtcdError {
    fn from(err: Error) -> Self {
        EtcdError::Public(err)
    }
}

impl From<EtcdError> for Error {
    /// Refused credentials and denied permissions become [`Error::Auth`]
    /// and [`Error::PermissionDenied`], other failures [`Error::Backend`].
    fn from(err: EtcdError) -> Self {
        let backend = |op, source| Error::Backend {
            backend: "etcd",
            op,
            source,
        };
        match err {
            EtcdError::Request { op, source } if is_no_space(&source) => {
                backend(op, Box::new(NoSpace(source)))
            }
            EtcdError::Request { op, source } => {
                secure::refused(op, source).unwrap_or_else(|e| backend(op, Box::new(e)))
            }
            EtcdError::NoAnswer { op, after } => backend(op, Box::new(NoAnswer(after))),
            EtcdError::Unconfirmed { id, within } => backend(
                "lease renewal",
                format!(
                    "no renewal of the new lease {id:x} was confirmed (answered, then a read \
                     answered in the same raft term) within {within:?} of asking for it; \
                     the lease was not used"
                )
                .into(),
            ),
            EtcdError::Failed { op, why } => backend(op, why.into_owned().into()),
            EtcdError::Public(e) => e,
        }
    }
}
