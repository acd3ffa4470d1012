//! What every operation of one locker shares: its connection, settings,
//! session lease, queue entry names and watches.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, GetResponse, Txn};

use super::handout::{Lease, LeaseEnd, Session};
use super::slots::Slots;
use crate::etcd::client::batch::{Answer, Batcher};
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::{self, request};
use crate::etcd::client::shared_watch::SharedWatches;
use crate::etcd::client::watch::WatchHub;
use crate::etcd::config::EtcdConfig;
use crate::etcd::protocol::keys::LockKeys;
use crate::fairness::Fairness;
use crate::{Error, Key};

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
    pub watches: SharedWatches,
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
            watches: SharedWatches::new(Arc::clone(&hub), timeout),
            hub,
            slots: Arc::default(),
            id: uuid::Uuid::new_v4().simple().to_string(),
            client,
            writes,
            config,
            fairness,
        }
    }

    /// The etcd keys of lock `key`.
    pub fn keys(&self, key: &Key) -> LockKeys {
        LockKeys::new(self.config.prefix(), key)
    }

    /// A txn sent alone, within the request timeout.
    pub async fn txn(&self, op: &'static str, txn: Txn) -> EtcdResult<Answer> {
        let mut kv = self.client.kv_client();
        request(op, self.config.request_timeout(), kv.txn(txn))
            .await
            .map(Answer::new)
    }

    /// A write that touches only the keys of the lock whose lock key is
    /// `lock`, sent together with other lockers' writes on this
    /// connection when others are on their way (see `client/batch.rs`).
    pub async fn write(
        &self,
        op: &'static str,
        lock: &[u8],
        txn: Txn,
        timeout: Duration,
    ) -> EtcdResult<Answer> {
        self.writes.write(op, lock, txn, timeout).await
    }

    /// A txn sent hedged (see [`request::txn_hedged`]): only for txns that
    /// are safe to send twice.
    pub async fn txn_hedged(&self, op: &'static str, txn: Txn) -> EtcdResult<Answer> {
        request::txn_hedged(&self.client, op, self.config.request_timeout(), txn)
            .await
            .map(Answer::new)
    }

    /// [`LockerState::write`], hedged (see [`request::hedged`]): only for
    /// writes that are safe to send twice.
    pub async fn write_hedged(
        &self,
        op: &'static str,
        lock: &[u8],
        txn: Txn,
    ) -> EtcdResult<Answer> {
        let timeout = self.config.request_timeout();
        request::hedged(timeout / 3, || self.write(op, lock, txn.clone(), timeout)).await
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
        EtcdError::Public(Error::SessionLost {
            key: key.to_string(),
            reason: "the session lease expired before the request ran".into(),
        })
    }
}
