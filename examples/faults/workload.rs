//! What the workers do between faults (`--workload`): the mutex cycle of
//! `worker.rs`, shared locks and permits (`sections.rs`), or an election
//! (`sections.rs`, followed by `observer.rs`). One enum, so the
//! orchestrator, the workers and the checkers agree on the keys.

/// The read/write lock of the shared workload.
pub const RW_KEY: &str = "rw";
/// The semaphore of the shared workload.
pub const PERMIT_KEY: &str = "permits";
/// How many permits of [`PERMIT_KEY`] may be held at once.
pub const LIMIT: u32 = 2;
/// The election of the election workload.
pub const ELECTION: &str = "e";

/// Which primitive the workers exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `lock` on one key, a fenced counter increment.
    Mutex,
    /// Mostly `read_lock`, some `write_lock` on [`RW_KEY`], and one of
    /// [`LIMIT`] permits of [`PERMIT_KEY`].
    Shared,
    /// `campaign`, a fenced write of the term, `resign`; one observer.
    Election,
}

impl Workload {
    pub fn parse(s: &str) -> Option<Workload> {
        match s {
            "mutex" => Some(Workload::Mutex),
            "shared" => Some(Workload::Shared),
            "election" => Some(Workload::Election),
            _ => None,
        }
    }

    /// The keys the workers lock (the first: the one a Redis Cluster's
    /// faults target, `redis_deploy.rs`).
    pub fn lock_keys(self) -> &'static [&'static str] {
        match self {
            Workload::Mutex => &[crate::worker::LOCK_KEY],
            Workload::Shared => &[RW_KEY, PERMIT_KEY],
            Workload::Election => &[ELECTION],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Mutex => "mutex",
            Workload::Shared => "shared",
            Workload::Election => "election",
        }
    }
}

/// What one critical section of the shared and election workloads holds,
/// as its `ACQ` line names it (`kind=...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Read,
    Write,
    Permit,
    Leader,
}

impl Section {
    pub fn name(self) -> &'static str {
        match self {
            Section::Read => "read",
            Section::Write => "write",
            Section::Permit => "permit",
            Section::Leader => "leader",
        }
    }

    pub fn parse(s: &str) -> Option<Section> {
        [
            Section::Read,
            Section::Write,
            Section::Permit,
            Section::Leader,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }

    /// The lock key (or election) the section is taken on.
    pub fn lock_key(self) -> &'static str {
        match self {
            Section::Read | Section::Write => RW_KEY,
            Section::Permit => PERMIT_KEY,
            Section::Leader => ELECTION,
        }
    }

    /// The shared workload's mix for a worker's `n`th cycle: two reads, a
    /// write, two permits in every five (enough permit calls at once that
    /// a third permit would be seen granted, were the limit not kept).
    pub fn shared_mix(n: u64) -> Section {
        match n % 5 {
            0 | 2 => Section::Read,
            4 => Section::Write,
            _ => Section::Permit,
        }
    }
}
