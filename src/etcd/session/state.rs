//! What every operation of one locker shares: its connection, settings,
//! session lease, queue entry names and watches.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, GetResponse, Txn};

use super::handout::{Lease, LeaseEnd, Session};
use super::lease::margin;
use super::queue_heads::QueueHeads;
use super::slots::Slots;
use super::vigil::Vigils;
use crate::Key;
use crate::etcd::client::batch::Batcher;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::own_watch::OwnWatches;
use crate::etcd::client::request::{Answer, hedged, request};
use crate::etcd::client::watch::WatchHub;
use crate::etcd::config::EtcdConfig;
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::protocol::ops::Repeatable;
use crate::semantics::fairness::Fairness;
use crate::util::observe::Site;

/// How a txn travels to etcd (see [`LockerState::send`]).
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    /// Alone, within the request timeout.
    Alone,
    /// Together with other lockers' writes on this connection when others
    /// are on their way (see `client/batch.rs`), within `within`: only for
    /// a write that touches only the keys of the lock whose lock key is
    /// `lock`.
    Batched { lock: &'a [u8], within: Duration },
}

/// A txn to send, and whether a second copy may go ([`Repeatable`]).
pub(crate) struct Outgoing {
    txn: Txn,
    repeatable: bool,
}

impl From<Txn> for Outgoing {
    /// A txn that is sent once.
    fn from(txn: Txn) -> Self {
        Outgoing {
            txn,
            repeatable: false,
        }
    }
}

impl From<Repeatable> for Outgoing {
    /// A txn that is safe to send twice: sent hedged.
    fn from(txn: Repeatable) -> Self {
        Outgoing {
            txn: txn.into_txn(),
            repeatable: true,
        }
    }
}

/// The state one locker's operations share (its clones share it too).
pub(crate) struct LockerState {
    pub client: Client,
    /// Shared by the lockers of one connection (see `client/batch.rs`).
    pub writes: Arc<Batcher>,
    pub config: EtcdConfig,
    pub fairness: Fairness,
    /// Names this locker's level in the queue (`_OWNERS_/<id>/...`).
    pub id: String,
    pub session: Session,
    /// The queue entry names in use (see `session/slots.rs`).
    pub slots: Arc<Slots>,
    pub hub: Arc<WatchHub>,
    pub watches: OwnWatches,
    /// Over locks freed with nobody to hand them on (see `vigil.rs`).
    pub vigils: Vigils,
    /// The waiters last read at the head of each queue (`queue_heads.rs`).
    pub heads: QueueHeads,
}

impl LockerState {
    pub fn new(
        client: Client,
        writes: Arc<Batcher>,
        config: EtcdConfig,
        fairness: Fairness,
    ) -> Self {
        let timeout = config.request_timeout();
        let hub = Arc::new(WatchHub::new(client.clone(), timeout));
        LockerState {
            session: Session::new(
                client.clone(),
                config.ttl_secs(),
                timeout,
                config.prefix().as_bytes().to_vec(),
            ),
            watches: OwnWatches::new(Arc::clone(&hub), timeout),
            vigils: Vigils::new(
                client.clone(),
                Arc::clone(&hub),
                timeout,
                (margin(config.ttl()), fairness),
            ),
            hub,
            heads: QueueHeads::default(),
            slots: Arc::default(),
            id: uuid::Uuid::new_v4().simple().to_string(),
            client,
            writes,
            config,
            fairness,
        }
    }

    /// The backend and mode, as logs and metrics label them.
    pub fn site(&self) -> Site {
        Site::new("etcd", self.fairness)
    }

    /// The etcd keys of lock `key`.
    pub fn keys(&self, key: &Key) -> LockKeys {
        LockKeys::new(self.config.prefix(), key)
    }

    /// Sends `txn` (the step `op` of the protocol) by `path`: the one way
    /// every txn of a locker goes to etcd. A [`Repeatable`] txn is sent
    /// [hedged](hedged) (a second copy when the first has not answered
    /// within a third of its timeout: for a batched one, from when it went
    /// out); any other txn once.
    pub async fn send(
        &self,
        op: &'static str,
        path: Path<'_>,
        txn: impl Into<Outgoing>,
    ) -> EtcdResult<Answer> {
        let Outgoing { txn, repeatable } = txn.into();
        let timeout = self.config.request_timeout();
        let once = |txn: Txn| async move {
            let mut kv = self.client.kv_client();
            request(op, timeout, kv.txn(txn)).await.map(Answer::new)
        };
        match (path, repeatable) {
            (Path::Batched { lock, within }, _) => {
                self.writes.write(op, lock, txn, within, repeatable).await
            }
            (Path::Alone, true) => hedged(timeout / 3, || once(txn.clone())).await,
            (Path::Alone, false) => once(txn).await,
        }
    }

    /// `txn` sent alone ([`Path::Alone`]): see [`LockerState::send`].
    pub async fn txn(&self, op: &'static str, txn: impl Into<Outgoing>) -> EtcdResult<Answer> {
        self.send(op, Path::Alone, txn).await
    }

    pub async fn get(
        &self,
        op: &'static str,
        key: Vec<u8>,
        opts: GetOptions,
    ) -> EtcdResult<GetResponse> {
        let mut kv = self.client.kv_client();
        request(op, self.config.request_timeout(), kv.get(key, Some(opts))).await
    }

    /// Maps "lease not found" to [`Error::SessionLost`] (and forgets the
    /// lease so the next attempt grants a new one).
    pub async fn lease_error(&self, key: &Key, lease: &Lease, err: EtcdError) -> EtcdError {
        if !err.is_lease_not_found() {
            return err;
        }
        self.session.forget(lease.id, LeaseEnd::GoneInEtcd).await;
        EtcdError::session_lost(key, "the session lease expired before the request ran")
    }
}
