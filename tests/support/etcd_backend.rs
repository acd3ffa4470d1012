//! Test support: the conformance suite's [`Backend`] on etcd, shared by
//! tests/etcd.rs and etcd_loss.rs (a plain etcd) and tests/tls_etcd.rs (mutual TLS, as a
//! user whose role covers only the test prefix).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use etcd_client::Client;
use fairlock::conformance::Backend;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Key, Locker};

use super::{count_keys, wait_for_calls, wait_for_count};

/// Lockers on one connection under one prefix, and a connection that may
/// read everything under it for the checks.
pub struct EtcdBackend {
    /// The connection the lockers share.
    pub client: Client,
    /// For the checks: `client` itself on a plain etcd, root on a secured
    /// one (a restricted user may not read what the checks read).
    pub checker: Client,
    pub config: EtcdConfig,
    /// Every locker handed out, so `finish` can check their leases.
    lockers: Mutex<Vec<EtcdLocker>>,
}

impl EtcdBackend {
    pub fn new(client: Client, checker: Client, config: EtcdConfig) -> Self {
        EtcdBackend {
            client,
            checker,
            config,
            lockers: Mutex::new(Vec::new()),
        }
    }

    /// On the shared test etcd, under a prefix of its own for `test`.
    #[allow(dead_code)] // not every test file that includes support uses it
    pub async fn on_shared(test: &str) -> Self {
        let server = super::shared();
        let client = server.client().await;
        let config =
            EtcdConfig::new([server.endpoint.clone()]).with_prefix(super::unique_prefix(test));
        EtcdBackend::new(client.clone(), client, config)
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        let locker = EtcdLocker::from_client(self.client.clone(), self.config.clone(), fair);
        self.lockers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(locker.clone());
        Arc::new(locker)
    }
    fn supports_shared(&self) -> bool {
        true
    }
    fn supports_lock_all(&self) -> bool {
        true
    }
    async fn wait_queued(&self, key: &Key, n: usize) {
        let queue = format!("{}{key}/_OWNERS_/", self.config.prefix());
        wait_for_calls(&mut self.checker.clone(), &queue, n as i64).await;
    }
    async fn wait_clean(&self) {
        wait_for_count(&mut self.checker.clone(), self.config.prefix(), 0, true).await;
    }
    async fn is_clean(&self) -> bool {
        count_keys(&mut self.checker.clone(), self.config.prefix()).await == 0
    }
    /// Nothing left under the prefix, and every locker's session lease
    /// gone once it is closed.
    async fn finish(&self) {
        assert!(
            self.is_clean().await,
            "keys left under {}",
            self.config.prefix()
        );
        let lockers = std::mem::take(&mut *self.lockers.lock().unwrap_or_else(|e| e.into_inner()));
        for locker in lockers {
            let Some(lease) = locker.session_lease().await else {
                continue;
            };
            locker.close().await.expect("close");
            let ttl = self
                .checker
                .clone()
                .lease_time_to_live(lease, None)
                .await
                .expect("ttl");
            assert_eq!(ttl.ttl(), -1, "lease {lease:x} left behind");
        }
    }
}
