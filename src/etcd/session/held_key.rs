//! Watching a key held since a revision until it changes: the loss watch
//! of a held lock key (`lock/held_lock.rs`) and of a line entry
//! (`line/held_entry.rs`) alike.

use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Ev, Events, Target, WatchMsg};
use crate::etcd::session::state::LockerState;
use tokio_util::sync::CancellationToken;

/// What counts as a change of a held key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Any write or its deletion: a lock key or a line entry, which only
    /// its holder's release changes. `token` is its mod revision.
    Any,
    /// Its deletion alone: a contender key of etcd's layout, which its
    /// leader's proclaims rewrite. `token` is its create revision.
    Deleted,
}

/// Returns once `key`, written at revision `token`, changes (see
/// [`Change`]): `Some(true)` when rewritten, `Some(false)` when deleted;
/// `None` once `stop` is cancelled. Watches from `token + 1`, so no
/// change since can slip by; after a compaction past it, or while etcd
/// does not answer, it reads the key before watching again (the lease
/// deadline covers an etcd that never answers).
pub(crate) async fn until_changed(
    state: &LockerState,
    key: &[u8],
    (token, change): (i64, Change),
    stop: &CancellationToken,
) -> Option<bool> {
    let mut backoff = retry_backoff();
    let mut from = token + 1;
    let counts = |e: &Ev| e.key == key && (change == Change::Any || !e.put);
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
                    WatchMsg::Events { events } if events.iter().any(counts) => {
                        return Some(events.iter().filter(|e| counts(e)).any(|e| e.put));
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
            let now = resp.kvs().first().map(|kv| match change {
                Change::Any => kv.mod_revision(),
                Change::Deleted => kv.create_revision(),
            });
            if now != Some(token) {
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
