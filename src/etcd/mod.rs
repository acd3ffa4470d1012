//! The etcd backend.
//!
//! - `config.rs`: [`EtcdConfig`], endpoints and timeouts.
//! - `locker.rs`: [`EtcdLocker`], connect, `try_lock`, `lock`.
//! - `queue.rs`: waiting in the `_OWNERS_` queue (both modes).
//! - `release.rs`: unlock, handing the lock key to the next waiter.
//! - `session.rs`: the locker's session lease, its keepalive task and the
//!   local deadline behind `LockGuard::is_held`.
//! - `fence.rs`: [`FencedTxn`], etcd writes that apply only while the lock
//!   is held.
//! - `watch.rs`, `shared_watch.rs`: watches multiplexed on one stream, and
//!   the long-lived ones reused across waits.
//! - `status.rs`: [`EtcdLocker::status`], who holds and who waits.
//! - `keys.rs`: the key layout; `slots.rs`: the queue entry names a
//!   locker reuses, so waiting leaves no new key names behind.
//! - `secure.rs`: TLS options, and telling TLS, authentication and
//!   permission failures from the rest.
//!
//! # How a lock works here
//! The lock key `<prefix><key>` is held by whoever wrote it: a txn creates it
//! only if its create revision is 0, bound to the locker's session lease so a
//! crashed holder's lock expires after the TTL. Waiters queue under
//! `<prefix><key>/_OWNERS_/`, ordered by create revision. A releasing holder
//! looks at the first waiter: a fair one is handed the lock key in the
//! release txn (one etcd write per handoff); for an unfair one the key is
//! freed, so newcomers may barge in before the woken waiter retries. Either
//! way the release touches that one waiter's queue key, which its locker
//! watches: one release wakes one waiter. A fair grant also passes the
//! waiters behind the grantee along, so most holders release without a
//! read. Waiters watch nothing else unless they wait longer than a tenth of
//! the TTL (then their predecessor, to notice a lock freed by a crash; see
//! `queue.rs`). The fencing token is the revision at which the holder got
//! the lock key.

mod config;
mod fence;
mod keys;
mod locker;
mod queue;
mod release;
mod secure;
mod session;
mod shared_watch;
mod slots;
mod status;
mod watch;

use std::sync::Arc;
use std::time::Duration;

/// Re-exported from the crate root, where it now lives.
pub use crate::{Owner, parse_duration};
pub use config::{DEFAULT_ENDPOINT, DEFAULT_PREFIX, EtcdConfig, MAX_TTL, MIN_TTL};
pub use fence::FencedTxn;
pub use locker::EtcdLocker;

use crate::{Error, Locker, Result};

/// Connects to etcd and registers it as the process-wide locker provider:
/// every [`crate::get_locker`] call then returns a new [`EtcdLocker`] (its
/// own session lease) sharing this connection.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// fairlock::etcd::register(fairlock::etcd::EtcdConfig::from_env()?).await?;
/// let locker = fairlock::get_locker(true)?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InvalidConfig`] for a bad configuration; [`Error::Connect`] when
/// etcd cannot be reached within the connect timeout.
///
/// # Cancel safety
/// Cancel safe: nothing is registered until the connection is up.
pub async fn register(config: EtcdConfig) -> Result<()> {
    let client = locker::connect(&config).await?;
    crate::register_locker_provider(move |fair| {
        Arc::new(EtcdLocker::from_client(
            client.clone(),
            config.clone(),
            fair,
        )) as Arc<dyn Locker>
    });
    Ok(())
}

/// Wraps an etcd-client error for `op`: refused credentials and denied
/// permissions as [`Error::Auth`] and [`Error::PermissionDenied`], the rest
/// as [`Error::Backend`].
pub(crate) fn etcd_err(op: &'static str) -> impl Fn(etcd_client::Error) -> Error {
    move |e| {
        secure::refused(op, e).unwrap_or_else(|e| Error::Backend {
            backend: "etcd",
            op,
            source: Box::new(e),
        })
    }
}

/// The error of a request that took longer than the request timeout.
pub(crate) fn timeout_err(op: &'static str, after: Duration) -> Error {
    Error::Backend {
        backend: "etcd",
        op,
        source: Box::new(NoAnswer(after)),
    }
}

/// A request got no answer within the request timeout.
#[derive(Debug, thiserror::Error)]
#[error("no answer within the request timeout of {0:?}")]
struct NoAnswer(Duration);

/// `true` if etcd answered that the lease does not exist (it expired or
/// was revoked).
pub(crate) fn is_lease_not_found(err: &Error) -> bool {
    match err {
        Error::Backend { source, .. } => source.to_string().contains("lease not found"),
        _ => false,
    }
}

/// `true` if `err` may pass when the request is sent again: no answer in
/// time, a connection that failed, or a member that is down, has no leader
/// or lost it (etcd's "unavailable"). Such a request may also have been
/// applied anyway.
pub(crate) fn is_transient(err: &Error) -> bool {
    let Error::Backend { source, .. } = err else {
        return false;
    };
    source.is::<NoAnswer>()
        || source
            .downcast_ref::<etcd_client::Error>()
            .is_some_and(is_transient_etcd)
}

/// `true` if `err` is an answer from an etcd server (such as "no leader"),
/// not a failure to reach one.
pub(crate) fn is_server_answer(err: &Error) -> bool {
    let Error::Backend { source, .. } = err else {
        return false;
    };
    source
        .downcast_ref::<etcd_client::Error>()
        .is_some_and(is_server_answer_etcd)
}

/// [`is_server_answer`] for an etcd-client error.
pub(crate) fn is_server_answer_etcd(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status)
        if std::error::Error::source(status).is_none())
}

/// [`is_transient`] for an etcd-client error.
pub(crate) fn is_transient_etcd(err: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match err {
        E::TransportError(_) | E::IoError(_) => true,
        // gRPC codes: 1 cancelled, 2 unknown, 4 deadline exceeded,
        // 8 resource exhausted, 10 aborted, 14 unavailable.
        E::GRpcStatus(status) => matches!(status.code() as i32, 1 | 2 | 4 | 8 | 10 | 14),
        _ => false,
    }
}
