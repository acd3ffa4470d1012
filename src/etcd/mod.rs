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
//! the TTL (then they join their locker's one vigil over the lock, to
//! notice a lock freed by a crash; see `session/vigil.rs`). The fencing token is the revision at which the holder
//! got the lock key. The whole protocol, with why it is safe, is
//! specified in `protocol/mod.rs`.
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
//! One folder per concern, from the bottom up; a file uses only what the
//! folders above it in this list, and the files before it in its own folder,
//! hold.
//! - `endpoint.rs`, `config.rs`: endpoints as people write them, and
//!   [`EtcdConfig`];
//! - `client/`: the connection: requests with their timeouts and errors,
//!   which member each goes to, writes that go together, watches
//!   multiplexed on one stream;
//! - `protocol/`: **what fairlock writes to etcd and reads from it**, with
//!   its specification at the top of `protocol/mod.rs`: the key layout,
//!   every transaction and every read whose answer it acts on, as builders
//!   and readers that send nothing;
//! - `session/`: a locker's session lease: granted, renewed (a renewal
//!   counts only when a read confirms it), revived after it lapsed here only,
//!   and the queue entry names a locker reuses;
//! - `line/`: read/write locks and semaphores: joining a key's line,
//!   waiting in it, leaving it;
//! - `etcd_layout/`: fair locks on etcd's own keys ([`Layout::Etcd`]),
//!   shared with `etcdctl lock` and Go's `concurrency.Mutex`: one call, its
//!   wait and the held lock;
//! - `lock/`: the lock itself, following one call down: [`EtcdLocker`] on
//!   top, then one attempt, the wait in line, the held lock and its
//!   release;
//! - `election/`: leader election, [`EtcdElector`]: a fair lock per
//!   election and the leader's record beside it;
//! - `lock_server.rs`: how etcd serves each call of the one `Locker`
//!   (`crate::semantics::dispatch`), handed to the folder that serves it.

mod client;
mod config;
mod election;
mod endpoint;
mod etcd_layout;
mod line;
mod lock;
mod lock_server;
mod protocol;
mod session;

use std::sync::Arc;

pub use crate::{Owner, parse_duration};
pub use config::{DEFAULT_ENDPOINT, DEFAULT_PREFIX, EtcdConfig, Layout, MAX_TTL, MIN_TTL};
pub use election::elector::EtcdElector;
pub use endpoint::DEFAULT_PORT;
pub use lock::etcd_locker::EtcdLocker;
pub use lock::fence::FencedTxn;

use crate::{Locker, Result};

/// Connects to etcd and registers it as the process-wide locker provider:
/// every [`crate::get_locker`] call then returns a new [`EtcdLocker`] (its
/// own session lease) sharing this connection, and sending the writes it
/// makes at the same time as the others together with theirs (see
/// [`EtcdConfig::with_write_batching`]); and [`crate::get_elector`] a new
/// [`EtcdElector`] on it.
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
    let client = client::connect::connect(&config).await?;
    let writes = client::batch::Batcher::new(client.clone(), config.write_batching());
    let locker = move |fair| {
        EtcdLocker::on_connection(client.clone(), Arc::clone(&writes), config.clone(), fair)
    };
    let elector = locker.clone();
    crate::register_locker_provider(move |fair| Arc::new(locker(fair)) as Arc<dyn Locker>);
    crate::register_elector_provider(move || {
        Arc::new(EtcdElector::of(elector(true))) as Arc<dyn crate::Elector>
    });
    Ok(())
}
