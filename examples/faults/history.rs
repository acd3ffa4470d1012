//! etcd's own history of a phase, replayed with a watch from the phase's
//! first revision: what the checkers trust over what workers say.
//!
//! The cluster never compacts (etcd's default), so every revision is still
//! there at the end of the run.

use etcd_client::{Client, EventType, WatchOptions};

use crate::BoxError;

/// One key change.
#[derive(Clone, Debug)]
pub struct Change {
    pub revision: i64,
    pub key: String,
    /// `None` for a delete.
    pub put: Option<Put>,
}

#[derive(Clone, Debug)]
pub struct Put {
    pub value: String,
    pub create_revision: i64,
}

/// Every change under `prefix` after revision `from`, in revision order.
///
/// Writes `sentinel` (a key under `prefix`) first and reads until its
/// event: the watch has then delivered everything before it. The sentinel
/// is deleted again and not part of the answer.
pub async fn replay(
    client: &mut Client,
    prefix: &str,
    from: i64,
    sentinel: &str,
) -> Result<Vec<Change>, BoxError> {
    let end = client
        .put(sentinel, "end", None)
        .await?
        .header()
        .map(|h| h.revision())
        .ok_or("no header")?;
    let mut stream = client
        .watch(
            prefix,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(from + 1),
            ),
        )
        .await?;
    let mut changes = Vec::new();
    let mut complete = false;
    'read: while let Some(msg) = stream.message().await? {
        if msg.canceled() {
            return Err(format!("history watch cancelled: {}", msg.cancel_reason()).into());
        }
        for ev in msg.events() {
            let Some(kv) = ev.kv() else { continue };
            if kv.mod_revision() >= end {
                complete = true;
                break 'read;
            }
            let put = match ev.event_type() {
                EventType::Put => Some(Put {
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    create_revision: kv.create_revision(),
                }),
                EventType::Delete => None,
            };
            changes.push(Change {
                revision: kv.mod_revision(),
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                put,
            });
        }
    }
    drop(stream);
    client.delete(sentinel, None).await?;
    if !complete {
        return Err("the history watch ended before the sentinel".into());
    }
    Ok(changes)
}
