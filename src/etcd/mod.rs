//! The etcd backend.
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
//!
//! # Connecting
//! [`EtcdLocker::connect`] and [`register`] wait until some member answers,
//! within the connect timeout. An endpoint without a port means port 2379.
//! When every endpoint refuses connections (nothing listens there), they
//! give up after about a second with [`crate::Error::Connect`]; to wait for
//! a server that is still starting, set the connect timeout
//! ([`EtcdConfig::with_connect_timeout`]): refused connections are then
//! retried for all of it.
//!
//! ## Layout
//! From the bottom up: each file uses only files listed before it.
//! - `endpoint.rs`: endpoints as people write them (default port);
//! - `config.rs`: [`EtcdConfig`]; `secure.rs`: TLS options, and telling
//!   refused credentials and denied permissions apart;
//! - `error.rs`: the backend's private error type, told apart by gRPC code
//!   and mapped into [`crate::Error`];
//! - `request.rs`: one request with its timeout, txn part builders, the
//!   retry backoff; `request_body.rs`: request bodies whose message ends
//!   its HTTP/2 stream; `batch.rs`: writes of one connection that go
//!   together in one txn while others are on their way;
//! - `keys.rs`: every etcd wire format: key layout, mode tags, owner
//!   values, the passed-along successor list;
//! - `stale_token.rs`: etcd's refusal of an auth token older than its
//!   last change to users or roles, read as one of an invalid token (on
//!   which etcd-client authenticates again);
//! - `health.rs`: how a member has been answering; `balance.rs`: which
//!   member a request goes to (passing over members that stopped
//!   answering); `connect.rs`: connecting, and its errors;
//! - `lease.rs`: a session lease as the locker sees it, and the local
//!   deadline behind `LockGuard::is_held`; `renewal.rs`: a lease's
//!   keepalive task, which counts a renewal only when a read confirms it;
//!   `revival.rs`: the lock keys lost holdings leave on a lease that lapsed
//!   here, deleted before it is renewed again; `session.rs`: the locker's
//!   session lease, handed out once a renewal counted, and revived for its
//!   waiters after it lapsed here only;
//! - `watch.rs`: watches multiplexed on one stream; `shared_watch.rs`: the
//!   long-lived ones reused across waits; `slots.rs`: the queue entry
//!   names a locker reuses;
//! - `state.rs`: what one locker's operations share;
//! - `held.rs`: a held lock, the waiters behind it, the loss watch;
//! - `release.rs`: unlock, handing the lock key to the next waiter;
//! - `cleanup.rs`: removing what an abandoned attempt wrote;
//! - `attempt.rs`: one call to `lock` or `try_lock` and its writes;
//! - `place.rs`: a waiter's re-read of the queue; `waiting.rs`: what a
//!   waiter listens to; `queue.rs`: the wait in line, as a state machine;
//! - `retry.rs`: when to try a failed attempt again;
//! - `locker.rs`: [`EtcdLocker`]; `fence.rs`: [`FencedTxn`]; `status.rs`:
//!   [`EtcdLocker::status`].

mod attempt;
mod balance;
mod batch;
mod cleanup;
mod config;
mod connect;
mod endpoint;
mod error;
mod fence;
mod health;
mod held;
mod keys;
mod lease;
mod locker;
mod place;
mod queue;
mod release;
mod renewal;
mod request;
mod request_body;
mod retry;
mod revival;
mod secure;
mod session;
mod shared_watch;
mod slots;
mod stale_token;
mod state;
mod status;
mod waiting;
mod watch;

use std::sync::Arc;

pub use crate::{Owner, parse_duration};
pub use config::{DEFAULT_ENDPOINT, DEFAULT_PREFIX, EtcdConfig, MAX_TTL, MIN_TTL};
pub use endpoint::DEFAULT_PORT;
pub use fence::FencedTxn;
pub use locker::EtcdLocker;

use crate::{Locker, Result};

/// Connects to etcd and registers it as the process-wide locker provider:
/// every [`crate::get_locker`] call then returns a new [`EtcdLocker`] (its
/// own session lease) sharing this connection, and sending the writes it
/// makes at the same time as the others together with theirs (see
/// [`EtcdConfig::with_write_batching`]).
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
/// [`crate::Error::InvalidConfig`] for a bad configuration;
/// [`crate::Error::Connect`] when etcd cannot be reached within the connect
/// timeout (see [`EtcdLocker::connect`]).
///
/// # Cancel safety
/// Cancel safe: nothing is registered until the connection is up.
pub async fn register(config: EtcdConfig) -> Result<()> {
    let client = connect::connect(&config).await?;
    let writes = batch::Batcher::new(client.clone(), config.write_batching());
    crate::register_locker_provider(move |fair| {
        Arc::new(EtcdLocker::on_connection(
            client.clone(),
            Arc::clone(&writes),
            config.clone(),
            fair,
        )) as Arc<dyn Locker>
    });
    Ok(())
}
