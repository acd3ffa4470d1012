//! The faults of the Redis fault runs (`redis_faults.rs`), per deployment:
//! what each does, what Redis itself promises under it, and how soon the
//! lock must be granted again.

use std::time::Duration;

use crate::Opts;

/// How long a deployment may take to name a new master (or to restart)
/// beyond the TTL: the sentinels' `failover-timeout` (5000 ms in
/// `tests/support/redis_sentinel.rs`), which also covers a cluster's
/// failure detection (2 x `cluster-node-timeout` 1000 ms) and its election.
pub const FAILOVER_ALLOWANCE: Duration = Duration::from_secs(5);

/// One Redis deployment under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deployment {
    /// One redis-server.
    Single,
    /// A master, a replica and three sentinels (down-after 1000 ms).
    Sentinel,
    /// Three masters with a replica each (node-timeout 1000 ms).
    Cluster,
}

impl Deployment {
    pub fn parse(s: &str) -> Option<Deployment> {
        Some(match s {
            "single" => Deployment::Single,
            "sentinel" => Deployment::Sentinel,
            "cluster" => Deployment::Cluster,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Deployment::Single => "single",
            Deployment::Sentinel => "sentinel",
            Deployment::Cluster => "cluster",
        }
    }

    /// The faults of one round, in order.
    pub fn faults(self) -> &'static [RedisFault] {
        match self {
            Deployment::Single => &[RedisFault::RestartVolatile, RedisFault::RestartDurable],
            Deployment::Sentinel => &[
                RedisFault::SentinelFailover,
                RedisFault::SentinelKill,
                RedisFault::SentinelPause,
            ],
            Deployment::Cluster => &[
                RedisFault::ClusterFailover,
                RedisFault::ClusterKill,
                RedisFault::ClusterPause,
                RedisFault::ClusterMigrate,
            ],
        }
    }
}

/// One kind of fault of a Redis deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisFault {
    /// kill -9, started again on the same port with `--save ""
    /// --appendonly no`: it comes back empty.
    RestartVolatile,
    /// kill -9, started again with `--appendonly yes --appendfsync
    /// always` on the same directory: it comes back with every
    /// acknowledged write.
    RestartDurable,
    /// `SENTINEL FAILOVER mymaster`.
    SentinelFailover,
    /// kill -9 of the master; started again (empty) as a replica of the
    /// new master once the replica is promoted.
    SentinelKill,
    /// SIGSTOP of the master until the sentinels promote the replica.
    SentinelPause,
    /// The master cut off from the sentinels and the replica, not from
    /// its clients, until the sentinels promote the replica and a lock is
    /// granted there; then healed, and the sentinels make it a replica
    /// (network namespaces: `redis_cutoff.rs`, `--redis sentinel --net`).
    SentinelCutoff,
    /// `CLUSTER FAILOVER` on the replica of the master of the workers' slot.
    ClusterFailover,
    /// kill -9 of that master; started again (empty, with its nodes.conf)
    /// once its replica took over, it rejoins as a replica.
    ClusterKill,
    /// SIGSTOP of that master until its replica took over.
    ClusterPause,
    /// The workers' slot migrated to another master while the lock is
    /// held (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`, `MIGRATE` of its
    /// keys, `CLUSTER SETSLOT ... NODE`).
    ClusterMigrate,
}

impl RedisFault {
    pub fn label(self) -> &'static str {
        match self {
            RedisFault::RestartVolatile => "kill -9 + restart, no persistence",
            RedisFault::RestartDurable => "kill -9 + restart, AOF fsync always",
            RedisFault::SentinelFailover => "SENTINEL FAILOVER",
            RedisFault::SentinelKill => "kill -9 master (back as replica)",
            RedisFault::SentinelPause => "SIGSTOP master past down-after",
            RedisFault::SentinelCutoff => "master cut off from sentinels+replica",
            RedisFault::ClusterFailover => "CLUSTER FAILOVER (slot's replica)",
            RedisFault::ClusterKill => "kill -9 slot's master (back as repl.)",
            RedisFault::ClusterPause => "SIGSTOP slot's master past timeout",
            RedisFault::ClusterMigrate => "slot migrated to another master",
        }
    }

    /// What Redis itself promises of the data under this fault: what a
    /// lock on it can rely on.
    pub fn promise(self) -> &'static str {
        match self {
            RedisFault::RestartVolatile => {
                "nothing survives: the instance comes back with no keys (no lock, no fencing \
                 counter); Redlock's advice is to stay down a TTL"
            }
            RedisFault::RestartDurable => {
                "every acknowledged write survives (fsync before the reply), expiry times \
                 included: the lock and the counter are as they were"
            }
            RedisFault::SentinelFailover | RedisFault::ClusterFailover => {
                "a planned failover waits for the replica to catch up before promoting it, \
                 but the old master may go on acknowledging writes until it learns it was \
                 demoted: those are lost"
            }
            RedisFault::SentinelKill | RedisFault::ClusterKill => {
                "replication is asynchronous: writes acknowledged by the master that did \
                 not reach the replica before the kill are lost"
            }
            RedisFault::ClusterMigrate => {
                "MIGRATE moves keys atomically with their expiry; during the move a \
                 command on a key already moved is redirected (ASK) and a multi-key \
                 command over keys on both sides fails (TRYAGAIN): nothing acknowledged \
                 is lost"
            }
            RedisFault::SentinelCutoff => {
                "the cut-off master goes on answering its clients as a master, with no \
                 replica to take its writes, until the partition heals and the sentinels \
                 make it a replica: writes it acknowledges after the cut are lost"
            }
            RedisFault::SentinelPause | RedisFault::ClusterPause => {
                "as a kill, and the paused master, once resumed, answers as a master until \
                 it is told to follow the new one: writes it acknowledges then are lost"
            }
        }
    }

    /// How soon after the injection a lock must be granted again (on the
    /// deployment as healed): the long holder's hold (the fault lands
    /// while it holds) + TTL + failover allowance + margin.
    pub fn bound(self, o: &Opts) -> Duration {
        bound(o)
    }
}

/// The recovery bound of every Redis fault (see [`RedisFault::bound`]).
pub fn bound(o: &Opts) -> Duration {
    o.long_hold + o.ttl + FAILOVER_ALLOWANCE + o.margin
}
