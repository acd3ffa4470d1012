//! The order in which etcd saw the requests arrive.
//!
//! `lock` makes one write to ask: a txn that either takes the free lock key
//! or creates the request's entry in the lock's queue, and the queue is
//! ordered by that entry's create revision. Either way the write stores
//! the request's owner value, whose first word names the attempt. So the
//! revision of the first write of an attempt's value under the run's
//! prefix is when etcd saw it ask (its arrival), and the write of the lock
//! key at revision `token` names the attempt granted with that fencing
//! token. The demo replays the run's writes from etcd's history (a watch
//! from the revision before the run) and reads both off.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};

use super::record::{AnyError, LOCK_KEY};

/// The last key the demo writes in a run: the replay reads up to it.
const END_KEY: &str = "end";

/// How long the replay of one run may take.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// Arrival revisions, by fencing token.
pub struct Arrivals {
    by_token: HashMap<u64, i64>,
}

impl Arrivals {
    pub fn from_map(by_token: HashMap<u64, i64>) -> Self {
        Arrivals { by_token }
    }

    /// The revision at which etcd saw the request granted with `token`
    /// arrive.
    pub fn of(&self, token: u64) -> Option<i64> {
        self.by_token.get(&token).copied()
    }
}

/// etcd's current revision, to replay the run under `run_prefix` from.
pub async fn revision_now(client: &mut Client, run_prefix: &str) -> Result<i64, AnyError> {
    let resp = client
        .get(run_prefix, Some(GetOptions::new().with_count_only()))
        .await?;
    Ok(resp.header().map_or(0, |h| h.revision()))
}

/// Replays the writes under `run_prefix` made after revision `since` and
/// finds each grant's arrival.
pub async fn replay(
    client: &mut Client,
    run_prefix: &str,
    since: i64,
) -> Result<Arrivals, AnyError> {
    match tokio::time::timeout(REPLAY_TIMEOUT, replay_unbounded(client, run_prefix, since)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "etcd did not replay the run's writes within {}s",
            REPLAY_TIMEOUT.as_secs()
        )
        .into()),
    }
}

async fn replay_unbounded(
    client: &mut Client,
    run_prefix: &str,
    since: i64,
) -> Result<Arrivals, AnyError> {
    let end = format!("{run_prefix}{END_KEY}").into_bytes();
    let lock = format!("{run_prefix}{LOCK_KEY}").into_bytes();
    client.put(end.clone(), "", None).await?;
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(since + 1);
    let mut stream = client.watch(run_prefix, Some(options)).await?;
    // The first write of each attempt, and which attempt each write of the
    // lock key names.
    let mut first_write: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut lock_writes: HashMap<i64, Vec<u8>> = HashMap::new();
    'replay: loop {
        let Some(resp) = stream.message().await? else {
            return Err("etcd ended the replay of the run's writes".into());
        };
        if resp.canceled() {
            return Err(format!(
                "etcd cannot replay the run's writes (history compacted up to revision {}): {}",
                resp.compact_revision(),
                resp.cancel_reason()
            )
            .into());
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            if kv.key() == end {
                break 'replay;
            }
            if event.event_type() != EventType::Put {
                continue;
            }
            let attempt = attempt_of(kv.value()).to_vec();
            first_write
                .entry(attempt.clone())
                .or_insert(kv.mod_revision());
            if kv.key() == lock {
                lock_writes.insert(kv.mod_revision(), attempt);
            }
        }
    }
    drop(stream);
    client.delete(end, None).await?;
    let by_token = lock_writes
        .into_iter()
        .filter_map(|(rev, attempt)| Some((u64::try_from(rev).ok()?, *first_write.get(&attempt)?)))
        .collect();
    Ok(Arrivals::from_map(by_token))
}

/// The attempt an owner value names: its first word.
fn attempt_of(value: &[u8]) -> &[u8] {
    value
        .split(|b| b.is_ascii_whitespace())
        .next()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_the_first_word_of_owner_values() {
        assert_eq!(attempt_of(b"a1b2 pid=1 host=h at=5"), b"a1b2");
        assert_eq!(attempt_of(b"a1b2 pid=1\n4 7 next/f0 x"), b"a1b2");
        assert_eq!(attempt_of(b""), b"");
    }
}
