//! The lease a contender's key is bound to. etcd's layout names the key
//! after its lease (`N/<lease hex>`), so one lease holds at most one key
//! per name: a locker's first call on a name uses the locker's session
//! lease; a second call on the same name at the same time (a `lock` of a
//! name this locker already holds or waits for) gets a lease of its own,
//! granted and renewed for it alone and revoked when it ends.
//!
//! Which of the two a call gets is a slot of the locker's (see
//! `session/slots.rs`): slot 0 is the session lease. A slot goes back to
//! the pool once the call's key is known deleted; one whose key may still
//! be written is retired, so a later call never reuses that key's name.

use std::sync::Arc;

use crate::etcd::client::error::EtcdResult;
use crate::etcd::protocol::etcd_layout::NameKeys;
use crate::etcd::session::handout::{Lease, Session};
use crate::etcd::session::slots::Slot;
use crate::etcd::session::state::LockerState;

/// The lease of one contender's key, and what ends with the contender.
pub(crate) struct ContenderLease {
    pub lease: Arc<Lease>,
    /// A session of the contender's own (none: the locker's). Dropping it
    /// revokes its lease.
    own: Option<Session>,
    slot: Option<Slot>,
}

impl ContenderLease {
    /// The lease for a new call on `names`.
    ///
    /// Errors: the session's (the grant, the read confirming the first
    /// renewal).
    pub async fn take(state: &LockerState, names: &NameKeys) -> EtcdResult<Self> {
        let mut slot = Unwritten(Some(state.slots.take(&names.dir)));
        let number = slot.0.as_ref().map_or(0, Slot::number);
        let taken = if number == 0 {
            state.session.lease().await.map(|lease| (lease, None))
        } else {
            let own = Session::new(
                state.client.clone(),
                state.config.ttl_secs(),
                state.config.request_timeout(),
                state.config.prefix().as_bytes().to_vec(),
            );
            own.lease().await.map(|lease| (lease, Some(own)))
        };
        let (lease, own) = taken?;
        Ok(ContenderLease {
            lease,
            own,
            slot: slot.0.take(),
        })
    }

    /// Whether the lease is the contender's own (see the module docs).
    pub fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// The contender ended: its key is `deleted` (known gone), or may
    /// still be in etcd. A lease of its own is revoked, which deletes the
    /// key in any case.
    pub fn done(mut self, deleted: bool) {
        if let Some(slot) = self.slot.take()
            && (deleted || self.own.is_some())
        {
            slot.free();
        }
    }
}

/// A slot taken for a call that has written nothing yet: freed, not
/// retired, when the call fails or is dropped before it has a lease.
struct Unwritten(Option<Slot>);

impl Drop for Unwritten {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.free();
        }
    }
}
