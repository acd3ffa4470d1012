//! The faults the suite injects, and one injection as done: what
//! recovery is measured from and within which bound.

use std::time::Duration;

use crate::Opts;
use crate::support::cluster::ELECTION_TIMEOUT;

/// A holder is paused (or cut off) this much longer than its TTL.
pub const PAST_TTL: Duration = Duration::from_millis(1500);

/// How long the holder stays stopped after its lease was revoked.
pub const REVOKED_PAUSE: Duration = Duration::from_millis(500);

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Baseline,
    LeaderPause(Duration),
    MemberKill,
    LeaderKill,
    HolderPause,
    HolderKill,
    /// The holder's lease revoked while it is stopped for less than the
    /// TTL: what an etcd that ends a live lease early does (see
    /// `check::etcd_ended_lease`).
    HolderRevoke,
    /// The network faults (`net_phases.rs`).
    HolderCut,
    WaiterCut,
    LeaderMinority,
    Loss,
    DelaySpikes,
    LinkFlap,
    /// A fault of a Redis deployment (`redis_faults.rs`; only a build with
    /// Redis makes one).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Redis(crate::redis_fault::RedisFault),
}

impl Fault {
    pub fn label(self, ttl: Duration) -> String {
        match self {
            Fault::Baseline => "none (baseline)".into(),
            Fault::LeaderPause(d) => format!("SIGSTOP leader {:.1}s", d.as_secs_f64()),
            Fault::MemberKill => "kill -9 + restart follower".into(),
            Fault::LeaderKill => "kill -9 + restart leader".into(),
            Fault::HolderPause => {
                format!("SIGSTOP holder {:.1}s", (ttl + PAST_TTL).as_secs_f64())
            }
            Fault::HolderKill => "kill -9 holder".into(),
            Fault::HolderRevoke => format!(
                "lease revoked, holder stopped {:.1}s",
                REVOKED_PAUSE.as_secs_f64()
            ),
            Fault::Redis(f) => f.label().into(),
            net => crate::net_phases::label(net, ttl),
        }
    }

    /// Holder faults are measured from the injection: the lock is stuck
    /// until the holder's lease expires. Cluster faults from their healing.
    pub fn on_holder(self) -> bool {
        matches!(
            self,
            Fault::HolderPause
                | Fault::HolderKill
                | Fault::HolderRevoke
                | Fault::HolderCut
                | Fault::WaiterCut
                | Fault::LeaderMinority
                | Fault::Redis(_)
        )
    }

    /// How soon a lock must be granted again (see `on_holder` for from
    /// when): TTL + election timeout + margin. An isolated leader costs
    /// one election timeout more: the new leader extends every lease by
    /// it when it takes over (etcd's lessor `Promote`); this assumes the
    /// majority elects it within one election timeout, and
    /// [`Injection::bound`] uses when it did.
    pub fn bound(self, o: &Opts) -> Duration {
        if let Fault::Redis(f) = self {
            return f.bound(o);
        }
        let bound = o.ttl + ELECTION_TIMEOUT + o.margin;
        if self == Fault::LeaderMinority {
            bound + ELECTION_TIMEOUT
        } else {
            bound
        }
    }
}

/// One injection, as done.
#[derive(Clone, Debug)]
pub struct Injection {
    pub fault: Fault,
    /// Window of the injection: from its start to the next one's.
    pub start: u64,
    pub end: u64,
    /// Recovery is measured from here (heal, or injection on a holder).
    pub measure_from: u64,
    /// First grant after `measure_from` (to another process, on a holder).
    pub recovery: Option<u64>,
    /// The paused or killed worker process, and the pause.
    pub target: Option<usize>,
    pub pause: Option<(u64, u64)>,
    /// When the target's link was cut and healed (network faults).
    pub cut: Option<(u64, u64)>,
    /// When the majority had a new leader (the isolated leader only).
    pub elected: Option<u64>,
    /// The holder had released before the signal landed: not counted.
    pub missed: bool,
}

impl Injection {
    /// An injection of `fault` starting (and measured from) `start`, with
    /// nothing yet known of how it went.
    pub fn at(fault: Fault, start: u64) -> Injection {
        Injection {
            fault,
            start,
            end: start,
            measure_from: start,
            recovery: None,
            target: None,
            pause: None,
            cut: None,
            elected: None,
            missed: false,
        }
    }

    /// How soon after `measure_from` a lock must be granted again: the
    /// fault's bound, and for the isolated leader TTL + election timeout +
    /// margin from when the majority had its new leader (etcd's lessor
    /// extends every lease by the election timeout at that moment, so the
    /// holder's lease cannot expire sooner, and how long the election takes
    /// is etcd's: a split vote costs another election timeout or two).
    pub fn bound(&self, o: &Opts) -> Duration {
        match (self.fault, self.elected) {
            (Fault::LeaderMinority, Some(elected)) => {
                Duration::from_nanos(elected.saturating_sub(self.measure_from))
                    + o.ttl
                    + ELECTION_TIMEOUT
                    + o.margin
            }
            (fault, _) => fault.bound(o),
        }
    }
}
