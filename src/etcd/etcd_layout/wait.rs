//! Waiting in etcd's layout: until no contender created before ours is
//! left under the name, whoever wrote it (a Go client, `etcdctl lock`,
//! etcd's lock service or another fairlock process).
//!
//! The waiter reads the key created last before its own, watches it (and
//! its own key) from the revision of that read, and reads again once that
//! key is deleted: it is first when the read finds none, as in etcd's
//! `waitDeletes`. A release thus wakes the next waiter alone, and each
//! waiter watches two keys, so a queue of `n` costs etcd `n` watchers and
//! each handoff a read, not `n` events. Keys created after its own never
//! count. Its own key deleted ends the wait with [`Error::SessionLost`]:
//! the waiter is told, where etcd's Go recipe before 3.5 grants it the
//! lock anyway (etcd issues 11408 and 19597).
//!
//! [`Error::SessionLost`]: crate::Error::SessionLost

use super::contender::Contender;
use crate::etcd::client::error::{ENTRY_GONE, EtcdError, EtcdResult, LEASE_LOST};
use crate::etcd::client::watch::{Events, Subscription, Target, WatchMsg};
use crate::etcd::protocol::etcd_layout;
use crate::util::observe;

/// Waits until our key, created at `rev`, is the first under the name.
///
/// Errors: [`crate::Error::SessionLost`] when our key is gone or our
/// lease was lost here; the requests' (the reads, the watches).
pub(crate) async fn until_first(c: &Contender, rev: i64) -> EtcdResult<()> {
    let state = &c.state;
    let mut own = None;
    loop {
        let answer = state
            .txn("ahead", etcd_layout::ahead(&c.names, &c.own, rev))
            .await?;
        let Some(ahead) = etcd_layout::read_ahead(&answer) else {
            return Err(EtcdError::session_lost(&c.key, ENTRY_GONE));
        };
        let Some(ahead) = ahead else {
            return Ok(());
        };
        observe::queued(None);
        let from = Some(answer.revision + 1);
        if own.is_none() {
            own = Some(deletion_of(c, c.own.clone(), from).await?);
        }
        let mut next = deletion_of(c, ahead, from).await?;
        loop {
            let msg = tokio::select! {
                msg = next.recv() => msg,
                msg = Subscription::next_of(&mut own) => match msg {
                    WatchMsg::Events { events } if events.iter().any(|e| !e.put) => {
                        return Err(EtcdError::session_lost(&c.key, ENTRY_GONE));
                    }
                    WatchMsg::Events { .. } | WatchMsg::Created => continue,
                    // Read again, and watch our key anew from there.
                    WatchMsg::Ended(_) => {
                        own = None;
                        break;
                    }
                },
                () = c.lease.lost.cancelled() => {
                    return Err(EtcdError::session_lost(&c.key, LEASE_LOST));
                }
            };
            match msg {
                // The key ahead was deleted, or the watch was compacted
                // past our revision or broke: read again.
                WatchMsg::Events { events } if events.iter().any(|e| !e.put) => break,
                WatchMsg::Ended(_) => break,
                WatchMsg::Events { .. } | WatchMsg::Created => {}
            }
        }
    }
}

/// A watch of the deletion of `key`, from revision `from`.
async fn deletion_of(c: &Contender, key: Vec<u8>, from: Option<i64>) -> EtcdResult<Subscription> {
    c.state
        .hub
        .subscribe(Target {
            key,
            range_end: None,
            start_revision: from,
            events: Events::DeletesOnly,
        })
        .await
}
