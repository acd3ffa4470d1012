//! `fairlock elect`: campaign for an election, run the command while
//! leading, resign when it ends. Its signals and exit codes are those of
//! `fairlock lock` (`lock.rs`), for a leadership instead of a lock.

use std::time::Duration;

use fairlock::etcd::EtcdElector;
use fairlock::redis::{RedisElector, RedisLocker};
use fairlock::{BackendConfig, Context, Elector, Error, Key, Leadership};

use crate::args::election_args::ElectArgs;
use crate::child::{Child, Signals, run_while_held};
use crate::exit::{self, report};

pub async fn run(config: BackendConfig, a: ElectArgs) -> u8 {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fairlock: cannot install signal handlers: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let name = Key::from(a.name());
    if let Err(e) = name.validate() {
        report(&e);
        return exit::USAGE;
    }
    let elector = match connect(&config).await {
        Ok(elector) => elector,
        Err(e) => {
            report(&e);
            return usage_or(&e);
        }
    };
    let value = a.proposal().map_or_else(default_value, str::to_string);
    let code = match campaign(&elector, &name, value.as_bytes(), &a, &mut signals).await {
        Ok(leadership) => lead(leadership, &a, &mut signals).await,
        Err(code) => code,
    };
    let _ = elector.close().await;
    code
}

/// An elector on the configured backend: etcd's or Redis'.
pub enum Electors {
    Etcd(EtcdElector),
    Redis(RedisElector),
}

impl std::ops::Deref for Electors {
    type Target = dyn Elector;

    fn deref(&self) -> &Self::Target {
        match self {
            Electors::Etcd(e) => e,
            Electors::Redis(e) => e,
        }
    }
}

impl Electors {
    /// Ends the session: etcd revokes its lease; Redis has none.
    pub async fn close(self) -> fairlock::Result<()> {
        match self {
            Electors::Etcd(e) => e.close().await,
            Electors::Redis(_) => Ok(()),
        }
    }
}

/// Connects an elector on the configured backend.
pub async fn connect(config: &BackendConfig) -> fairlock::Result<Electors> {
    match config {
        BackendConfig::Etcd(c) => Ok(Electors::Etcd(EtcdElector::connect(c.clone()).await?)),
        BackendConfig::Redis(c) => Ok(Electors::Redis(
            RedisLocker::connect(c.clone(), true).await?.elector(),
        )),
        other => Err(Error::Unsupported(format!(
            "leader election in the fairlock command runs on etcd and Redis; not on the {} \
             backend",
            other.backend()
        ))),
    }
}

/// The exit code of a failure to connect or campaign: usage for what the
/// user must change in the command line, else by the error.
pub fn usage_or(e: &Error) -> u8 {
    match e {
        Error::Unsupported(_)
        | Error::InvalidConfig(_)
        | Error::InvalidKey { .. }
        | Error::InvalidValue { .. } => exit::USAGE,
        e => exit::of(e),
    }
}

/// This process as observers see it by default: `HOST:PID`.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("{host}:{}", std::process::id())
}

/// Campaigns until elected, or says why not and returns the exit code.
async fn campaign(
    elector: &Electors,
    name: &Key,
    value: &[u8],
    a: &ElectArgs,
    signals: &mut Signals,
) -> Result<Leadership, u8> {
    let mut ctx = Context::background();
    if let Some(timeout) = a.run.timeout {
        ctx = ctx.with_timeout(timeout);
    }
    let (ctx, cancel) = ctx.with_cancel();
    let campaign = elector.campaign(&ctx, name, value);
    tokio::pin!(campaign);
    let mut interrupted = None;
    let outcome = loop {
        tokio::select! {
            res = &mut campaign => break res,
            sig = signals.recv(), if interrupted.is_none() => {
                // Leave the line: the cancelled campaign removes our entry
                // before it returns.
                interrupted = Some(sig);
                cancel.cancel();
            }
        }
    };
    match outcome {
        Ok(leadership) => Ok(leadership),
        Err(Error::Cancelled { .. }) if interrupted.is_some() => {
            let sig = interrupted.unwrap_or(libc::SIGINT);
            eprintln!("fairlock: interrupted while waiting to lead {name}; left the line");
            Err(128 + u8::try_from(sig).unwrap_or(0))
        }
        Err(Error::Timeout { .. }) => {
            let leader = describe_leader(&**elector, name).await;
            eprintln!(
                "fairlock: not elected within {:?} for {name} ({leader}); not running {}",
                a.run.timeout.unwrap_or_default(),
                a.cmd[0]
            );
            Err(a.run.conflict_code)
        }
        Err(e) => {
            report(&e);
            Err(usage_or(&e))
        }
    }
}

/// Runs the command while leading; returns the exit code.
async fn lead(leadership: Leadership, a: &ElectArgs, signals: &mut Signals) -> u8 {
    let name = leadership.name().clone();
    let term = leadership.fencing_token().to_string();
    let child = Child {
        cmd: &a.cmd,
        env: vec![
            ("FAIRLOCK_ELECTION", name.as_str().to_owned()),
            ("FAIRLOCK_TERM", term.clone()),
            ("FAIRLOCK_TOKEN", term),
        ],
        kill_after: a.run.kill_after,
        what: format!("leadership of {name}"),
    };
    run_while_held(leadership, child, signals).await
}

/// Who leads `name`, for a message.
async fn describe_leader(elector: &dyn Elector, name: &Key) -> String {
    let read = tokio::time::timeout(Duration::from_secs(5), elector.leader(name)).await;
    match read {
        Ok(Ok(Some(l))) => format!(
            "led by {} in term {}",
            String::from_utf8_lossy(&l.value),
            l.fencing_token
        ),
        Ok(Ok(None)) => "no leader yet".into(),
        _ => "its leader unknown".into(),
    }
}
