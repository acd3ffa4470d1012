//! Waiting in etcd's layout: until no contender created before ours is
//! left under the name, whoever wrote it (a Go client, `etcdctl lock`,
//! etcd's lock service or another fairlock process).
//!
//! The waiter reads the keys ahead of its own, then watches the name from
//! the revision of that read and crosses each deleted key off; it is
//! first once none is left. Keys created after its own never count. Its
//! own key deleted ends the wait with [`Error::SessionLost`]: the waiter
//! is told, where etcd's Go recipe before 3.5 grants it the lock anyway
//! (etcd issues 11408 and 19597).
//!
//! [`Error::SessionLost`]: crate::Error::SessionLost

use std::collections::HashSet;

use super::contender::Contender;
use crate::etcd::client::error::{ENTRY_GONE, EtcdError, EtcdResult, LEASE_LOST};
use crate::etcd::client::watch::{Events, Target, WatchMsg};
use crate::etcd::protocol::etcd_layout;
use crate::util::observe;

/// Waits until our key, created at `rev`, is the first under the name.
///
/// Errors: [`crate::Error::SessionLost`] when our key is gone or our
/// lease was lost here; the requests' (the read, the watch).
pub(crate) async fn until_first(c: &Contender, rev: i64) -> EtcdResult<()> {
    let state = &c.state;
    loop {
        let answer = state
            .txn("ahead", etcd_layout::ahead(&c.names, &c.own, rev))
            .await?;
        let Some(keys) = etcd_layout::read_ahead(&answer) else {
            return Err(EtcdError::session_lost(&c.key, ENTRY_GONE));
        };
        let mut ahead: HashSet<Vec<u8>> = keys.into_iter().collect();
        if ahead.is_empty() {
            return Ok(());
        }
        observe::queued(Some(ahead.len()));
        let mut sub = state
            .hub
            .subscribe(Target {
                key: c.names.dir.clone(),
                range_end: Some(c.names.end()),
                start_revision: Some(answer.revision + 1),
                events: Events::All,
            })
            .await?;
        loop {
            let msg = tokio::select! {
                msg = sub.recv() => msg,
                () = c.lease.lost.cancelled() => {
                    return Err(EtcdError::session_lost(&c.key, LEASE_LOST));
                }
            };
            match msg {
                WatchMsg::Created => {}
                WatchMsg::Events { events } => {
                    for deleted in events.iter().filter(|e| !e.put) {
                        if deleted.key == c.own {
                            return Err(EtcdError::session_lost(&c.key, ENTRY_GONE));
                        }
                        ahead.remove(&deleted.key);
                    }
                    if ahead.is_empty() {
                        return Ok(());
                    }
                }
                // Compacted past our revision, or the stream broke: read
                // again.
                WatchMsg::Ended(_) => break,
            }
        }
    }
}
