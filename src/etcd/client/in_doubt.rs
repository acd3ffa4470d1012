//! A write its caller may stop waiting for ([`InDoubt`]): fairlock's
//! layout (`lock/attempt.rs`) and etcd's (`etcd_layout/contender.rs`)
//! send their keys through one, so that the cleanup after a cancelled
//! call finishes the write first and cannot run before it lands.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use super::error::{EtcdError, EtcdResult};
use super::request::Answer;
use crate::util::unstoppable::Unstoppable;

/// A write sent but not answered yet, as its caller left it.
pub(crate) type Pending = Pin<Box<dyn Future<Output = EtcdResult<Answer>> + Send>>;

/// The write a call has on its way, and whether any of its writes may
/// still land unseen.
#[derive(Default)]
pub(crate) struct InDoubt {
    /// Polled in the caller's task (a task of its own per write cost a
    /// cross-thread hop each way) but kept here, not in the caller's
    /// future: if that future is dropped, the write stays for the cleanup
    /// ([`InDoubt::take`]). (In a mutex only to make the owner `Sync`: it
    /// is reached through `&mut self`, which needs no locking.)
    pending: Mutex<Option<Pending>>,
    /// A write failed in a way that does not tell whether etcd applied it
    /// (no answer, connection lost), or was left by a dropped call: it may
    /// still land later.
    pub unanswered: bool,
}

impl InDoubt {
    /// Sends `write` and waits for its answer. A write left over from an
    /// earlier, dropped call goes on in a task of its own ([`Unstoppable`])
    /// and counts as unanswered.
    pub async fn send(
        &mut self,
        write: impl Future<Output = EtcdResult<Answer>> + Send + 'static,
    ) -> EtcdResult<Answer> {
        let pending = self
            .pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        self.unanswered |= pending.is_some();
        let write = pending.insert(Box::pin(Unstoppable::new(write, || {
            Err(EtcdError::Failed {
                op: "write",
                why: "the write panicked (a bug in fairlock or etcd-client)".into(),
            })
        })));
        let result = write.await;
        *pending = None;
        if let Err(e) = &result {
            self.unanswered |= e.is_transient();
        }
        result
    }

    /// The write still on its way, if the caller gave up waiting for it:
    /// the cleanup awaits it before it takes anything back.
    pub fn take(&mut self) -> Option<Pending> {
        self.pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
