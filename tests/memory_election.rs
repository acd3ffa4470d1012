//! The election checks of the conformance suite on the in-process memory
//! backend.

use std::sync::Arc;

use async_trait::async_trait;
use fairlock::conformance::ElectionBackend;
use fairlock::memory::MemoryStore;
use fairlock::{Elector, Key};

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

impl Memory {
    fn clean(&self) -> bool {
        self.0.is_idle() && self.0.has_no_leaders()
    }
}

#[async_trait]
impl ElectionBackend for Memory {
    fn elector(&self) -> Arc<dyn Elector> {
        Arc::new(self.0.elector())
    }
    async fn wait_candidates(&self, name: &Key, n: usize) {
        until(|| self.0.waiting(name) >= n).await;
    }
    async fn wait_clean(&self) {
        until(|| self.clean()).await;
    }
    async fn is_clean(&self) -> bool {
        self.clean()
    }
    async fn finish(&self) {
        assert!(self.clean(), "the memory store is not idle at the end");
    }
}

fairlock::election_conformance_tests!(memory);
