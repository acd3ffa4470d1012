//! Test support: the conformance suite's [`ElectionBackend`] on etcd
//! (tests/etcd_election.rs, etcd_election_loss.rs).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use etcd_client::{Client, GetOptions};
use fairlock::conformance::ElectionBackend;
use fairlock::etcd::{EtcdConfig, EtcdElector, EtcdLocker};
use fairlock::{Elector, Key};

use super::{count_keys, wait_for_count, wait_on_prefix};

/// Electors on one connection under one prefix, and a client for the
/// checks.
pub struct EtcdElections {
    pub client: Client,
    pub config: EtcdConfig,
    /// Every elector handed out, so `finish` can check their leases.
    electors: Mutex<Vec<EtcdElector>>,
}

impl EtcdElections {
    /// On the shared test etcd, under a prefix of its own for `test`.
    pub async fn on_shared(test: &str) -> Self {
        let server = super::shared();
        let config =
            EtcdConfig::new([server.endpoint.clone()]).with_prefix(super::unique_prefix(test));
        EtcdElections::new(server.client().await, config)
    }

    pub fn new(client: Client, config: EtcdConfig) -> Self {
        EtcdElections {
            client,
            config,
            electors: Mutex::new(Vec::new()),
        }
    }

    /// A new elector, kept for `finish`.
    pub fn etcd_elector(&self) -> EtcdElector {
        let elector = EtcdElector::from_client(self.client.clone(), self.config.clone());
        self.electors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(elector.clone());
        elector
    }

    /// The candidates in election `name`'s line now, its leader not
    /// counted (as `status` lists them), and the revision read at.
    pub async fn candidates(&self, name: &Key) -> (usize, i64) {
        let queue = format!("{}{name}/_OWNERS_/", self.config.prefix());
        let rev = self
            .client
            .clone()
            .get(
                queue,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .expect("count")
            .header()
            .expect("header")
            .revision();
        let reader = EtcdLocker::from_client(self.client.clone(), self.config.clone(), true);
        let status = reader.status(Some(name)).await;
        let waiting = status
            .expect("status")
            .first()
            .map_or(0, |lock| lock.waiters.len());
        (waiting, rev)
    }
}

#[async_trait]
impl ElectionBackend for EtcdElections {
    fn elector(&self) -> Arc<dyn Elector> {
        Arc::new(self.etcd_elector())
    }

    async fn wait_candidates(&self, name: &Key, n: usize) {
        let queue = format!("{}{name}/_OWNERS_/", self.config.prefix());
        let read = || async {
            let (waiting, rev) = self.candidates(name).await;
            (waiting >= n, rev)
        };
        let never = || format!("{n} candidates never queued for {name}");
        wait_on_prefix(self.client.clone(), &queue, read, never).await;
    }

    async fn wait_clean(&self) {
        wait_for_count(&mut self.client.clone(), self.config.prefix(), 0, true).await;
    }

    async fn is_clean(&self) -> bool {
        count_keys(&mut self.client.clone(), self.config.prefix()).await == 0
    }

    /// Nothing left under the prefix, and every elector's session lease
    /// gone once it is closed.
    async fn finish(&self) {
        assert!(
            self.is_clean().await,
            "keys left under {}",
            self.config.prefix()
        );
        let electors =
            std::mem::take(&mut *self.electors.lock().unwrap_or_else(|e| e.into_inner()));
        for elector in electors {
            let Some(lease) = elector.locker().session_lease().await else {
                continue;
            };
            // A lease a test revoked is gone already: closing fails, and
            // the check below still holds.
            let _ = elector.close().await;
            let ttl = self
                .client
                .clone()
                .lease_time_to_live(lease, None)
                .await
                .expect("ttl");
            assert_eq!(ttl.ttl(), -1, "lease {lease:x} left behind");
        }
    }
}
