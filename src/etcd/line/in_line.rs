//! A caller waiting in a read/write lock's or semaphore's line: what it
//! listens to, how it checks its place (telling itself it holds when
//! nobody told it), and leaving the line when it gives up.

use std::sync::Arc;

use super::depart::{LineEntry, depart};
use super::held_entry::HeldEntry;
use crate::LockGuard;
use crate::etcd::client::error::{ENTRY_GONE, EtcdError, EtcdResult, LEASE_LOST};
use crate::etcd::client::own_watch::KeyListener;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Events, Subscription, Target, WatchMsg};
use crate::etcd::protocol::line_txn::{
    Own, check, check_more, in_the_way, queued_at, read_ahead, read_own, read_self_grant,
    self_grant,
};
use crate::etcd::session::handout::margin;
use crate::etcd::session::slots::Slot;
use crate::semantics::admission::Share;
use crate::semantics::armed::{Armed, TakeBack};

/// A caller in line: leaves the line when dropped while armed
/// ([`Armed`]).
pub(crate) struct LineAttempt {
    pub line: Arc<LineEntry>,
    /// The slot naming the entry (see `session/slots.rs`).
    pub slot: Option<Slot>,
}

impl Armed<LineAttempt> {
    /// The guard of its holding, granted at `token`.
    pub(crate) fn granted(mut self, token: i64) -> LockGuard {
        self.set_armed(false);
        let lease = &self.line.lease;
        let (lost, expiry) = (lease.lost.child_token(), lease.expiry.clone());
        let held = HeldEntry::new(Arc::clone(&self.line), token, self.slot.take());
        LockGuard::new(
            self.line.key.clone(),
            u64::try_from(token).unwrap_or_default(),
            Box::new(held),
        )
        .with_loss_signal(lost, Some(expiry))
    }
}

impl TakeBack for LineAttempt {
    /// Leaves the line (admitting whom that lets in), retried until done
    /// or the lease is lost.
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let (line, slot) = (Arc::clone(&self.line), self.slot.take());
        async move {
            let (lease, leaving) = (&line.lease, line.leaving());
            let mut backoff = retry_backoff();
            let mut uncertain = false;
            loop {
                match depart(&line.state, &leaving, queued_at(&line.entry, line.created)).await {
                    Ok(_) => {
                        if let (Some(slot), false) = (slot, uncertain) {
                            slot.free();
                        }
                        return;
                    }
                    Err(_) if lease.lost.is_cancelled() => return,
                    Err(_) => {
                        uncertain = true;
                        lease.pause(&mut backoff).await;
                    }
                }
            }
        }
    }
}

/// Waits until the waiter holds: its token.
pub(crate) async fn wait(w: &LineEntry, own: Option<KeyListener>) -> EtcdResult<i64> {
    let state = &w.state;
    let (own_start, own_end) = w.keys.own(w.share, &state.id);
    let mut own = match own {
        Some(own) => own,
        None => {
            // Opened after the join: a touch may have come before; check.
            let own = state
                .watches
                .listen(&own_start, Some(&own_end), &w.entry)
                .await?;
            if let Some(token) = check_place(w).await? {
                return Ok(token);
            }
            own
        }
    };
    let patience = tokio::time::sleep(margin(state.config.ttl()));
    tokio::pin!(patience);
    let mut blockers: Option<Subscription> = None;
    loop {
        tokio::select! {
            msg = own.recv() => match msg {
                WatchMsg::Events { events } => {
                    let told = events.iter().find(|e| {
                        e.key == w.entry && e.create_revision == w.created && e.mod_revision > w.created
                    });
                    if let Some(ev) = told {
                        return Ok(ev.mod_revision);
                    }
                }
                WatchMsg::Ended(_) => {
                    own = state.watches.listen(&own_start, Some(&own_end), &w.entry).await?;
                    if let Some(token) = check_place(w).await? {
                        return Ok(token);
                    }
                }
                WatchMsg::Created => {}
            },
            () = w.lease.lost.cancelled() => return Err(EtcdError::session_lost(&w.key, LEASE_LOST)),
            () = &mut patience, if blockers.is_none() => {
                blockers = Some(watch_blockers(w).await?);
                if let Some(token) = check_place(w).await? {
                    return Ok(token);
                }
            }
            msg = Subscription::next_of(&mut blockers) => match msg {
                WatchMsg::Events { .. } => {
                    if let Some(token) = check_place(w).await? {
                        return Ok(token);
                    }
                }
                WatchMsg::Ended(_) => {
                    blockers = Some(watch_blockers(w).await?);
                    if let Some(token) = check_place(w).await? {
                        return Ok(token);
                    }
                }
                WatchMsg::Created => {}
            },
        }
    }
}

/// Watches what may be in the waiter's way, from now on (a check follows
/// each opening, so nothing slips by).
async fn watch_blockers(w: &LineEntry) -> EtcdResult<Subscription> {
    let (start, end) = match w.share {
        Share::Read => w.keys.kind(Share::Write),
        Share::Write => w.keys.readers_and_writers(),
        Share::Permit { .. } => w.keys.kind(w.share),
    };
    w.state
        .hub
        .subscribe(Target {
            key: start,
            range_end: Some(end),
            start_revision: None,
            events: Events::All,
        })
        .await
}

/// Checks the waiter's place: its token if it holds (telling itself when
/// nobody told it), `None` while it waits.
async fn check_place(w: &LineEntry) -> EtcdResult<Option<i64>> {
    let state = &w.state;
    let resp = state
        .txn("place check", check(&w.keys, w.share, &w.entry, w.created))
        .await?;
    match read_own(w.created, &resp) {
        Own::Gone => {
            return Err(EtcdError::session_lost(&w.key, ENTRY_GONE));
        }
        Own::Told(token) => return Ok(Some(token)),
        Own::Untold => {}
    }
    let (mut counted, mut more) = read_ahead(&w.keys, &resp, 1);
    while counted < in_the_way(w.share) {
        let Some(after) = more else {
            // Fewer in the way than keep it waiting: it holds.
            let resp = state
                .txn("self grant", self_grant(&w.entry, w.created))
                .await?;
            return match read_self_grant(w.created, &resp, resp.revision) {
                Some(token) => Ok(Some(token)),
                None => Err(EtcdError::session_lost(
                    &w.key,
                    "its entry vanished before it could hold",
                )),
            };
        };
        let next = check_more(&w.keys, w.share, w.created, after);
        let resp = state.txn("place check", next).await?;
        let (n, m) = read_ahead(&w.keys, &resp, 0);
        (counted, more) = (counted + n, m);
    }
    Ok(None)
}
