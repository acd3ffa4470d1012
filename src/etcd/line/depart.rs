//! A caller's entry in a read/write lock's or semaphore's line, and
//! leaving the line: the departure txn, and telling those whose turn it
//! brings (their txns: `protocol/line_txn.rs`).

use std::sync::Arc;

use etcd_client::Compare;

use crate::Key;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::protocol::line::{Departure, LineKeys};
use crate::etcd::protocol::line_txn::{admit, head_more, leave, read_head};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::semantics::admission::Share;

/// A caller's entry in `key`'s line, as its join wrote it: the waiter's
/// (`in_line.rs`) and, once granted, the holder's (`held_entry.rs`).
pub(crate) struct LineEntry {
    pub state: Arc<LockerState>,
    pub key: Key,
    pub keys: LineKeys,
    pub share: Share,
    /// The entry's etcd key.
    pub entry: Vec<u8>,
    /// Its create revision: where it stands in line.
    pub created: i64,
    /// The session lease it is written with.
    pub lease: Arc<Lease>,
}

impl LineEntry {
    /// The entry, as [`depart`] takes it.
    pub(crate) fn leaving(&self) -> Leaving<'_> {
        Leaving {
            keys: &self.keys,
            share: self.share,
            entry: &self.entry,
            created: self.created,
        }
    }
}

/// An entry leaving its line.
pub(crate) struct Leaving<'a> {
    pub keys: &'a LineKeys,
    pub share: Share,
    pub entry: &'a [u8],
    /// Its create revision: where it stood in line.
    pub created: i64,
}

/// Deletes the entry if `still` holds (it is still the caller's), and
/// touches every waiter its departure admits, batch by batch. `Ok(false)`
/// if it was not the caller's any more (its lease ended, or someone
/// deleted or rewrote it): nothing was deleted.
///
/// A touch that fails (the waiter told itself first, or left) is fine:
/// each touch stands alone. A departure whose touches fail or never come
/// (etcd stopped answering after the delete; a holder whose lease ended)
/// leaves waiters that hold untold: they find out when their patience
/// runs out (see `join.rs`).
pub(crate) async fn depart(
    state: &LockerState,
    leaving: &Leaving<'_>,
    still: Compare,
) -> EtcdResult<bool> {
    let Leaving {
        keys,
        share,
        entry,
        created,
    } = *leaving;
    let resp = state.txn("leave", leave(keys, share, entry, still)).await?;
    if !resp.succeeded() {
        return Ok(false);
    }
    let mut departure = Departure::new(share, created, resp.revision);
    let (mut batch, mut last) = read_head(keys, &resp, 1);
    loop {
        let admitted = departure.admitted(&batch);
        // Once the entry is gone the departure is done: a failed touch or
        // read only leaves its waiters to their patience.
        if !admitted.is_empty() && state.txn("admit", admit(&admitted)).await.is_err() {
            return Ok(true);
        }
        let Some(after) = last.filter(|_| departure.more_may_hold()) else {
            return Ok(true);
        };
        let next = head_more(keys, share, (after, departure.at));
        let Ok(resp) = state.txn("admit", next).await else {
            return Ok(true);
        };
        (batch, last) = read_head(keys, &resp, 0);
    }
}
