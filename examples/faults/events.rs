//! The worker event lines and the orchestrator's live view of them.
//!
//! A worker prints one line per event on stdout:
//! `<KIND> <monotonic ns> <fencing token> [<seq>] [<detail>]`, e.g.
//! `ACQ 1234 57`, `W 1240 57 3 ok`. Reader threads parse them into [`Log`]
//! and wake whoever waits for a condition on it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::ChildStdout;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a worker reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Connected; detail: pid.
    Start,
    /// `lock` returned a guard.
    Acq,
    /// `is_held()` just before the write; detail: `1` or `0`.
    Held,
    /// A fenced write is about to be sent; detail: the counter value.
    WriteStart,
    /// Its outcome; detail: `ok`, `lost` or `err`.
    Write,
    /// After a loss, a write guarded only by etcd's compare of the lock
    /// key's revision with the token, to prove etcd itself rejects it.
    ProbeStart,
    /// Its outcome; detail: `ok`, `rejected` or `err`.
    Probe,
    /// The guard's `lost` signal fired.
    Lost,
    /// The critical section ends: `unlock` is called now.
    Rel,
    /// `unlock`'s outcome; detail: `ok`, `lost` or `err`.
    Unl,
    /// `lock` failed; detail: the error.
    LockErr,
    /// Some other request failed; detail: the error.
    Err,
    /// Stopping cleanly.
    Bye,
    /// The guard's deadline (CLOCK_MONOTONIC ns) after the hold, for the
    /// shared and election workloads: renewals move it past the grant's.
    Until,
    /// The observer saw a change; token: the leader's term (0: none).
    Observed,
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Start => "START",
            Kind::Acq => "ACQ",
            Kind::Held => "HELD",
            Kind::WriteStart => "WSTART",
            Kind::Write => "W",
            Kind::ProbeStart => "PSTART",
            Kind::Probe => "P",
            Kind::Lost => "LOST",
            Kind::Rel => "REL",
            Kind::Unl => "UNL",
            Kind::LockErr => "LERR",
            Kind::Err => "ERR",
            Kind::Bye => "BYE",
            Kind::Until => "UNTIL",
            Kind::Observed => "OBS",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "START" => Kind::Start,
            "ACQ" => Kind::Acq,
            "HELD" => Kind::Held,
            "WSTART" => Kind::WriteStart,
            "W" => Kind::Write,
            "PSTART" => Kind::ProbeStart,
            "P" => Kind::Probe,
            "LOST" => Kind::Lost,
            "REL" => Kind::Rel,
            "UNL" => Kind::Unl,
            "LERR" => Kind::LockErr,
            "ERR" => Kind::Err,
            "BYE" => Kind::Bye,
            "UNTIL" => Kind::Until,
            "OBS" => Kind::Observed,
            _ => return None,
        })
    }
}

/// One event of one worker process.
#[derive(Clone, Debug)]
pub struct Ev {
    pub kind: Kind,
    /// CLOCK_MONOTONIC, ns.
    pub t: u64,
    /// Fencing token of the guard concerned (0 if none).
    pub token: u64,
    /// Write sequence number within the process (0 if none).
    pub seq: u64,
    pub detail: String,
}

impl Ev {
    pub fn new(kind: Kind, token: u64, seq: u64, detail: impl Into<String>) -> Ev {
        Ev {
            kind,
            t: crate::mono_ns(),
            token,
            seq,
            detail: detail.into(),
        }
    }

    /// Prints the event as one line; stdout's line buffering writes it out
    /// whole, and a closed pipe (orchestrator gone) is ignored: the worker
    /// sees its stdin close and stops.
    pub fn emit(&self) {
        let detail = self.detail.replace('\n', " ");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "{} {} {} {} {}",
            self.kind.name(),
            self.t,
            self.token,
            self.seq,
            detail
        );
    }

    fn parse(line: &str) -> Option<Ev> {
        let mut f = line.splitn(5, ' ');
        let kind = Kind::parse(f.next()?)?;
        let t = f.next()?.parse().ok()?;
        let token = f.next()?.parse().ok()?;
        let seq = f.next()?.parse().ok()?;
        let detail = f.next().unwrap_or_default().to_string();
        Some(Ev {
            kind,
            t,
            token,
            seq,
            detail,
        })
    }
}

/// One worker process as the orchestrator saw it.
#[derive(Debug, Default)]
pub struct Proc {
    pub pid: u32,
    pub events: Vec<Ev>,
    /// When the orchestrator killed it (SIGKILL), if it did.
    pub killed_at: Option<u64>,
    /// Lines that did not parse (reported, never silently dropped).
    pub garbage: Vec<String>,
}

/// Everything the workers of one phase reported, by process number.
#[derive(Debug, Default)]
pub struct Log {
    pub procs: BTreeMap<usize, Proc>,
}

impl Log {
    /// Every `Acq` after `after`, as `(t, proc, token)`, in time order.
    pub fn grants_after(&self, after: u64) -> Vec<(u64, usize, u64)> {
        let mut v: Vec<_> = self
            .procs
            .iter()
            .flat_map(|(&p, proc)| {
                proc.events
                    .iter()
                    .filter(move |e| e.kind == Kind::Acq && e.t > after)
                    .map(move |e| (e.t, p, e.token))
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// The process holding the lock as far as its lines tell: its last
    /// `Acq` is not followed by `Rel` or `Lost`, and it was not killed.
    pub fn holder(&self) -> Option<(usize, u64, u64)> {
        self.procs
            .iter()
            .filter(|(_, p)| p.killed_at.is_none())
            .filter_map(|(&n, p)| {
                let last =
                    p.events.iter().rev().find(|e| {
                        matches!(e.kind, Kind::Acq | Kind::Rel | Kind::Lost | Kind::Bye)
                    })?;
                (last.kind == Kind::Acq).then_some((n, last.t, last.token))
            })
            .max_by_key(|&(_, t, _)| t)
    }
}

/// The log shared with the reader threads, and a signal on every change.
#[derive(Clone, Default)]
pub struct Shared {
    log: Arc<Mutex<Log>>,
    changed: Arc<Notify>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads process `proc`'s lines into the log until its stdout closes.
    pub fn read(&self, proc: usize, pid: u32, stdout: ChildStdout) {
        self.lock().procs.insert(
            proc,
            Proc {
                pid,
                ..Proc::default()
            },
        );
        let shared = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                {
                    let mut log = shared.lock();
                    let Some(p) = log.procs.get_mut(&proc) else {
                        break;
                    };
                    match Ev::parse(&line) {
                        Some(ev) => p.events.push(ev),
                        None => p.garbage.push(line),
                    }
                }
                shared.changed.notify_waiters();
            }
        });
    }

    /// Waits (up to 60 s) until worker 0 and, in fair mode all `n`
    /// workers, in unfair mode half of them, have been granted the lock
    /// once: unfair mode promises no order, and a worker can starve for
    /// 60 s behind the others' back-to-back sections.
    #[cfg(feature = "redis")]
    pub async fn wait_served(&self, fair: bool, n: usize) -> Result<(), String> {
        let need = if fair { n } else { n.div_ceil(2) };
        self.wait_for(Instant::now() + std::time::Duration::from_secs(60), |log| {
            let served: Vec<usize> = log
                .procs
                .iter()
                .filter(|(_, p)| p.events.iter().any(|e| e.kind == Kind::Acq))
                .map(|(&proc, _)| proc)
                .collect();
            (served.contains(&0) && served.len() >= need).then_some(())
        })
        .await
        .ok_or(format!(
            "worker 0 and {need} of the {n} workers did not get the lock within 60 s"
        ))
    }

    /// Waits until `cond` holds on the log, or `deadline`; returns its last
    /// answer. Woken by every new line, not by a clock.
    pub async fn wait_for<T>(
        &self,
        deadline: Instant,
        mut cond: impl FnMut(&Log) -> Option<T>,
    ) -> Option<T> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so no line can slip in between.
            notified.as_mut().enable();
            if let Some(v) = cond(&self.lock()) {
                return Some(v);
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }
}
