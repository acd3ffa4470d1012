//! The Redis runs' election workload beyond the workers' cycle
//! (`sections.rs`): the observer process (this binary with
//! `--redis-observer`), which follows the election as `observer.rs` does
//! on etcd, and the phase's end, where observers must converge
//! (`convergence::finale`).

use std::process::{Command, Stdio};
use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};

use crate::election_check::Finding;
use crate::events::{Ev, Kind};
use crate::redis_fault;
use crate::redis_faults::{Phase, Slot};
use crate::workload::Workload;
use crate::{BoxError, convergence, observer};

pub struct Args {
    url: String,
    prefix: String,
    ttl: Duration,
}

impl Args {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut next = |what: &str| {
            args.next()
                .ok_or(format!("--redis-observer: missing {what}"))
        };
        let url = next("url")?;
        let prefix = next("prefix")?;
        let ttl = next("ttl")?
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| "--redis-observer: bad ttl")?;
        Ok(Args { url, prefix, ttl })
    }
}

/// The locker of the observer and of the orchestrator's finale: the
/// workers' prefix and TTL.
fn locker_config(url: &str, prefix: &str, ttl: Duration) -> RedisConfig {
    RedisConfig::new([url.to_string()])
        .with_prefix(prefix.to_string())
        .with_ttl(ttl)
}

pub async fn run(a: Args) -> Result<(), BoxError> {
    let locker = RedisLocker::connect(locker_config(&a.url, &a.prefix, a.ttl), true).await?;
    Ev::new(Kind::Start, 0, 0, std::process::id().to_string()).emit();
    observer::follow(&locker, &observer::stop_on_eof()).await;
    drop(locker);
    Ev::new(Kind::Bye, 0, 0, "").emit();
    Ok(())
}

impl Phase<'_> {
    fn locks(&self) -> String {
        format!("{}locks:", self.prefix)
    }

    /// Starts the observer, outside the worker slots (no fault rotates it).
    pub fn spawn_observer(&mut self) -> Result<(), BoxError> {
        let proc = self.next_proc();
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "--redis-observer".to_string(),
                self.url.clone(),
                self.locks(),
                self.o.ttl.as_millis().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no observer stdout")?;
        self.shared.read(proc, child.id(), stdout);
        let stdin = child.stdin.take();
        self.observer = Some(Slot { proc, child, stdin });
        Ok(())
    }

    /// The election workload's finale (nothing for the others), within the
    /// Redis recovery bound; then the observer stops.
    pub async fn converge(&mut self) -> Result<Vec<Finding>, BoxError> {
        let Some(obs) = self.observer.as_ref().map(|s| s.proc) else {
            return Ok(Vec::new());
        };
        debug_assert_eq!(self.o.workload, Workload::Election);
        let config = locker_config(&self.url, &self.locks(), self.o.ttl);
        let locker = RedisLocker::connect(config, true).await?;
        let bound = redis_fault::bound(self.o);
        let findings = convergence::finale(&locker, &self.shared, obs, bound).await;
        drop(locker);
        if let Some(mut slot) = self.observer.take() {
            let stdin = slot.stdin.take();
            convergence::stop_observer(&self.shared, obs, stdin, &mut slot.child).await;
        }
        findings
    }
}
