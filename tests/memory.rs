//! The conformance suite on the in-process memory backend.

use std::sync::Arc;

use async_trait::async_trait;
use fairlock::conformance::Backend;
use fairlock::memory::MemoryStore;
use fairlock::{Key, Locker};

struct Memory(MemoryStore);

async fn memory(_test: &str) -> Memory {
    Memory(MemoryStore::new())
}

/// Polls the store between scheduler turns: the memory backend has no
/// events to watch, and its state changes only when other tasks run.
async fn until(mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), wait)
        .await
        .expect("memory store never reached the expected state");
}

#[async_trait]
impl Backend for Memory {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        Arc::new(self.0.locker(fair))
    }
    async fn wait_queued(&self, key: &Key, n: usize) {
        until(|| self.0.waiting(key) >= n).await;
    }
    async fn wait_clean(&self) {
        until(|| self.0.is_idle()).await;
    }
    async fn is_clean(&self) -> bool {
        self.0.is_idle()
    }
    async fn finish(&self) {
        assert!(self.0.is_idle(), "the memory store is not idle at the end");
    }
    fn supports_shared(&self) -> bool {
        true
    }
    fn supports_lock_all(&self) -> bool {
        true
    }
}

fairlock::conformance_tests!(memory);
