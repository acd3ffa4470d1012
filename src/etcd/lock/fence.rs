//! Fenced writes: etcd txns that apply only while the guard still holds the
//! lock (what Go's `Mutex.IsOwner()` compare is for).

use std::future::Future;

use etcd_client::{Compare, Txn, TxnOpResponse, TxnResponse};

use super::held_lock::HeldLock;
use crate::etcd::client::error::EtcdError;
use crate::etcd::etcd_layout::held::HeldContender;
use crate::etcd::line::held_entry::HeldEntry;
use crate::etcd::protocol::{etcd_layout, fence};
use crate::etcd::session::state::LockerState;
use crate::{Error, LockGuard, LossCause, Result};

/// etcd operations conditional on holding the lock; implemented for
/// [`LockGuard`]s handed out by [`crate::etcd::EtcdLocker`].
///
/// A lease cannot keep a paused or cut-off holder from acting after its lock
/// expired and was granted to someone else. A fenced txn can: etcd applies
/// it only if the lock key is still the one written at this guard's grant,
/// checked in the same transaction as the write.
pub trait FencedTxn: sealed::Sealed {
    /// The compare that holds exactly while this guard holds the lock: the
    /// lock key's mod revision equals the fencing token (for a read lock,
    /// write lock or permit: its entry's; in etcd's layout, the caller's
    /// key's create revision, as Go's `Mutex.IsOwner()`). Put it in the
    /// `when` of your own txn.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the guard does not come from the etcd
    /// backend.
    fn fence(&self) -> Result<Compare>;

    /// Runs `txn` only if this guard still holds the lock, and returns
    /// `txn`'s own response (its compares decide `succeeded()` as usual).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(guard: fairlock::LockGuard) -> fairlock::Result<()> {
    /// use etcd_client::{Txn, TxnOp};
    /// use fairlock::etcd::FencedTxn;
    ///
    /// let write = Txn::new().and_then([TxnOp::put("/app/counter", "42", None)]);
    /// match guard.fenced_txn(write).await {
    ///     Ok(_) => println!("written while holding the lock"),
    ///     Err(fairlock::Error::LockLost { .. }) => println!("not written: the lock was lost"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock is no longer held: nothing was
    /// applied, and the guard reports itself lost from then on. The same
    /// without a request when the lease's local deadline has passed.
    /// [`Error::Unsupported`] for a guard from another backend. A backend
    /// error (such as no answer within the request timeout) leaves it
    /// unknown whether `txn` was applied.
    ///
    /// # Cancel safety
    /// Once sent, a txn may be applied even if this future is dropped.
    fn fenced_txn(&self, txn: Txn) -> impl Future<Output = Result<TxnResponse>> + Send;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::LockGuard {}
}

/// The compare that holds while a guard from the etcd backend holds its
/// lock, and its locker's state: the lock key of a mutex, the entry of a
/// read lock, write lock or permit, still at the guard's token (its mod
/// revision); in etcd's layout, the contender key still the one created
/// at the token (its create revision: a leader's proclaims rewrite it).
fn held(guard: &LockGuard) -> Result<(Compare, &LockerState)> {
    let backend = guard.backend();
    if let Some(held) = backend.and_then(|b| b.downcast_ref::<HeldLock>()) {
        return Ok((fence::fence(&held.keys.lock, held.token), &held.state));
    }
    if let Some(held) = backend.and_then(|b| b.downcast_ref::<HeldEntry>()) {
        return Ok((fence::fence(&held.line.entry, held.token), &held.line.state));
    }
    if let Some(held) = backend.and_then(|b| b.downcast_ref::<HeldContender>()) {
        return Ok((etcd_layout::still_ours(&held.own, held.rev), &held.state));
    }
    Err(Error::Unsupported(
        "fenced etcd txns need a guard from the etcd backend (fairlock::etcd::EtcdLocker)".into(),
    ))
}

fn lost(guard: &LockGuard, cause: LossCause, reason: &str) -> Error {
    guard.mark_lost(cause);
    Error::LockLost {
        key: guard.key().to_string(),
        reason: reason.into(),
    }
}

impl FencedTxn for LockGuard {
    fn fence(&self) -> Result<Compare> {
        Ok(held(self)?.0)
    }

    async fn fenced_txn(&self, txn: Txn) -> Result<TxnResponse> {
        let (fence, state) = held(self)?;
        if !self.is_held() {
            return Err(lost(
                self,
                LossCause::Expired,
                "the session lease's local deadline passed; the txn was not sent",
            ));
        }
        let fenced = fence::fenced(fence, txn);
        let resp = state.txn("fenced txn", fenced).await?;
        if !resp.succeeded() {
            return Err(lost(
                self,
                LossCause::KeyChanged,
                "the lock key changed since this guard's grant; the txn was not applied",
            ));
        }
        match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Txn(inner)) => Ok(inner),
            _ => Err(EtcdError::Failed {
                op: "fenced txn",
                why: "etcd answered the fenced txn in an unexpected shape".into(),
            }
            .into()),
        }
    }
}
