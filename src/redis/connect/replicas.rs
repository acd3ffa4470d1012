//! How many replicas must acknowledge a grant or an extend on one node
//! before it counts ([`ReplicaAcks`], `durability.rs` says why): a fixed
//! number, the replicas the sentinels list, or on a cluster the replicas
//! of the master of the lock's slot that are not failing.
//!
//! Behind sentinels the number never drops while the locker stays on one
//! master unless the sentinels flag replicas down: a replica that stops
//! replicating (its link down, or promoted in a failover not yet
//! announced) may still be, or already be, the next master, and the old
//! master's writes must go on falling short until the locker leaves it.
//! On a master it has just moved to, the locker counts only the replicas
//! replicating (the old master is listed among them for about ten seconds
//! before the sentinels reconfigure it, while it reports itself a master
//! and could acknowledge nothing). At connect it counts every replica not
//! flagged down that may be promoted with the master's writes: a replica
//! that reports itself a master counts only if it was promoted from this
//! master (a failover not yet announced), not if it is an old master or
//! a node that restarted empty (`listing.rs` tells them apart).
//!
//! The listing is read when the node connects, again at most a second
//! after it was last read while requests come (in the background: a
//! request uses the numbers it has), and at once (at most every 100 ms)
//! after a write fell short. A listing that cannot be read keeps the last
//! one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::redis::config::topology::ReplicaAcks;
use crate::redis::connect::link::Link;
use crate::redis::connect::listing::Listing;
use crate::redis::connect::sentinel::Primary;
use crate::redis::protocol::slots::{SLOTS, slot};

/// How old a listing may get while requests come.
const FRESH: Duration = Duration::from_secs(1);
/// How soon after a read a write that fell short reads it again.
const AFTER_SHORTFALL: Duration = Duration::from_millis(100);

/// Where the number comes from.
enum Source {
    /// A number set by the configuration (0: nothing is waited for).
    Fixed(usize),
    /// `SENTINEL REPLICAS`: the replicas up.
    Sentinel(Arc<Primary>),
    /// `CLUSTER NODES`: per slot, the replicas of its master not failing.
    Cluster(Link),
}

/// The last listing read.
enum Counts {
    /// Behind sentinels: the number, and the master it was read for.
    One(usize, Option<String>),
    Slots(Vec<u8>),
}

/// The replicas a grant or extend on one node must reach.
pub(crate) struct Replicas {
    source: Source,
    counts: Mutex<(Counts, Instant)>,
    reading: AtomicBool,
}

impl Replicas {
    /// The replicas of a master behind sentinels, by `acks`.
    pub fn sentinel(acks: ReplicaAcks, primary: &Arc<Primary>) -> Arc<Self> {
        Self::new(match acks {
            ReplicaAcks::All => Source::Sentinel(Arc::clone(primary)),
            _ => fixed(acks),
        })
    }

    /// The replicas of a cluster's masters, by `acks`.
    pub fn cluster(acks: ReplicaAcks, link: &Link) -> Arc<Self> {
        Self::new(match acks {
            ReplicaAcks::All => Source::Cluster(link.clone()),
            _ => fixed(acks),
        })
    }

    /// An independent master's: none are listed, so only
    /// [`ReplicaAcks::AtLeast`] waits.
    pub fn master(acks: ReplicaAcks) -> Arc<Self> {
        Self::new(fixed(acks))
    }

    fn new(source: Source) -> Arc<Self> {
        let count = match source {
            Source::Fixed(n) => n,
            _ => 0,
        };
        Arc::new(Replicas {
            source,
            counts: Mutex::new((Counts::One(count, None), Instant::now())),
            reading: AtomicBool::new(false),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, (Counts, Instant)> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the listing now (at connect).
    ///
    /// # Errors
    /// The request's error, for a listing that could not be read.
    pub async fn read(&self) -> redis::RedisResult<()> {
        let counts = match &self.source {
            Source::Fixed(_) => return Ok(()),
            Source::Sentinel(primary) => {
                let listing = primary.replicas().await?;
                let (last, last_master) = match &self.counts().0 {
                    Counts::One(n, master) => (*n, master.clone()),
                    Counts::Slots(_) => (0, None),
                };
                Counts::One(sentinel_count(&listing, last, last_master), listing.master)
            }
            Source::Cluster(link) => {
                let nodes: String = link.query(redis::cmd("CLUSTER").arg("NODES"), None).await?;
                Counts::Slots(slot_replicas(&nodes))
            }
        };
        *self.counts() = (counts, Instant::now());
        Ok(())
    }

    /// How many replicas a write to the keys starting with `key` must
    /// reach; starts a new read in the background when the listing is
    /// older than a second.
    pub fn needed(self: &Arc<Self>, key: &str) -> usize {
        let (needed, read_at) = {
            let counts = self.counts();
            let needed = match &counts.0 {
                Counts::One(n, _) => *n,
                Counts::Slots(slots) => usize::from(slots[usize::from(slot(key))]),
            };
            (needed, counts.1)
        };
        if read_at.elapsed() > FRESH {
            self.read_soon();
        }
        needed
    }

    /// A write fell short: reads the listing again unless it is newer
    /// than 100 ms.
    pub fn fell_short(self: &Arc<Self>) {
        if self.counts().1.elapsed() > AFTER_SHORTFALL {
            self.read_soon();
        }
    }

    /// Reads the listing in the background, unless a read is under way.
    fn read_soon(self: &Arc<Self>) {
        if matches!(self.source, Source::Fixed(_)) || self.reading.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.reading.store(false, Ordering::SeqCst);
            return;
        };
        let this = Arc::clone(self);
        rt.spawn(async move {
            if this.read().await.is_err() {
                // Keep the last listing; try again after the same pause.
                this.counts().1 = Instant::now();
            }
            this.reading.store(false, Ordering::SeqCst);
        });
    }
}

/// The replicas a grant must reach behind sentinels, from `listing` and
/// the number `last` read for `last_master` (`None`: the first read, at
/// connect; see the module docs).
fn sentinel_count(listing: &Listing, last: usize, last_master: Option<String>) -> usize {
    match last_master {
        // Connecting: a failover of this master may be under way.
        None => listing.not_down,
        Some(last_master) if listing.master.as_ref() == Some(&last_master) => {
            listing.replicating.max(last.min(listing.not_down))
        }
        Some(_) => listing.replicating,
    }
}

/// The number a setting fixes.
fn fixed(acks: ReplicaAcks) -> Source {
    match acks {
        ReplicaAcks::AtLeast(n) => Source::Fixed(n),
        ReplicaAcks::All | ReplicaAcks::Off => Source::Fixed(0),
    }
}

/// Per slot, from `CLUSTER NODES`, how many replicas its master has that
/// are not failing. A line is `<id> <addr> <flags> <master id> <ping>
/// <pong> <epoch> <link> <slot ranges...>`.
fn slot_replicas(nodes: &str) -> Vec<u8> {
    let failing = |flags: &str| {
        flags
            .split(',')
            .any(|f| matches!(f, "fail" | "fail?" | "handshake" | "noaddr"))
    };
    let mut replicas: HashMap<&str, u8> = HashMap::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [_, _, flags, master, ..] = fields[..]
            && flags.split(',').any(|f| f == "slave" || f == "replica")
            && !failing(flags)
        {
            *replicas.entry(master).or_default() += 1;
        }
    }
    let mut slots = vec![0u8; SLOTS];
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, _, flags, _, _, _, _, _, ranges @ ..] = &fields[..] else {
            continue;
        };
        if !flags.split(',').any(|f| f == "master") {
            continue;
        }
        let count = replicas.get(id).copied().unwrap_or(0);
        for range in ranges.iter().filter(|r| !r.starts_with('[')) {
            let (from, to) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(from), Ok(to)) = (from.parse::<usize>(), to.parse::<usize>()) {
                for s in slots.iter_mut().take(to.min(SLOTS - 1) + 1).skip(from) {
                    *s = count;
                }
            }
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_count_drops_only_with_down_flags_or_a_new_master() {
        let listing = |master: &str, replicating, not_down| Listing {
            master: Some(master.to_owned()),
            replicating,
            not_down,
        };
        let old = Some("m:1".to_owned());
        // At connect, every replica not flagged down.
        assert_eq!(sentinel_count(&listing("m:1", 0, 1), 0, None), 1);
        // Steady.
        assert_eq!(sentinel_count(&listing("m:1", 1, 1), 1, old.clone()), 1);
        // A failover not yet announced: the replica, promoted, no longer
        // replicates, but is not down: the old master's writes must fail.
        assert_eq!(sentinel_count(&listing("m:1", 0, 1), 1, old.clone()), 1);
        // The replica is flagged down: nothing to wait for.
        assert_eq!(sentinel_count(&listing("m:1", 0, 0), 1, old.clone()), 0);
        // On the new master, the old one not reconfigured yet.
        assert_eq!(sentinel_count(&listing("m:2", 0, 1), 1, old), 0);
        // Then it replicates.
        assert_eq!(
            sentinel_count(&listing("m:2", 1, 1), 0, Some("m:2".into())),
            1
        );
    }

    #[test]
    fn cluster_nodes_give_each_slot_its_masters_replicas() {
        let nodes = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922 [5461->-c]
c 127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7003@17003 slave a 0 0 1 connected
e 127.0.0.1:7004@17004 slave a 0 0 1 connected
f 127.0.0.1:7005@17005 slave,fail b 0 0 2 connected
g 127.0.0.1:7006@17006 master,fail - 0 0 4 disconnected
h 127.0.0.1:7007@17007 slave c 0 0 3 connected
";
        let slots = slot_replicas(nodes);
        assert_eq!((slots[0], slots[5460]), (2, 2));
        assert_eq!((slots[5461], slots[10922]), (0, 0));
        assert_eq!((slots[10923], slots[16383]), (1, 1));
    }
}
