//! Watching a key held since a revision until it changes: the loss watch
//! of a held lock key (`lock/held_lock.rs`) and of a line entry
//! (`line/held_entry.rs`) alike.

use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Events, Target, WatchMsg};
use crate::etcd::session::state::LockerState;
use tokio_util::sync::CancellationToken;

/// Returns once `key`, written at revision `token`, changes: `Some(true)`
/// when rewritten, `Some(false)` when deleted; `None` once `stop` is
/// cancelled. Watches from `token + 1`, so no change since can slip by;
/// after a compaction past it, or while etcd does not answer, it reads the
/// key before watching again (the lease deadline covers an etcd that never
/// answers).
pub(crate) async fn until_changed(
    state: &LockerState,
    key: &[u8],
    token: i64,
    stop: &CancellationToken,
) -> Option<bool> {
    let mut backoff = retry_backoff();
    let mut from = token + 1;
    while !stop.is_cancelled() {
        let target = Target {
            key: key.to_vec(),
            range_end: None,
            start_revision: Some(from),
            events: Events::All,
        };
        if let Ok(mut sub) = state.hub.subscribe(target).await {
            loop {
                match sub.recv().await {
                    WatchMsg::Events { events } if events.iter().any(|e| e.key == key) => {
                        return Some(events.iter().any(|e| e.key == key && e.put));
                    }
                    WatchMsg::Ended(_) => break,
                    _ => {}
                }
            }
        }
        if let Ok(resp) = state
            .get("held key check", key.to_vec(), Default::default())
            .await
        {
            if resp.kvs().first().map(|kv| kv.mod_revision()) != Some(token) {
                return Some(!resp.kvs().is_empty());
            }
            if let Some(header) = resp.header() {
                from = header.revision() + 1;
            }
        }
        backoff.sleep().await;
    }
    None
}
