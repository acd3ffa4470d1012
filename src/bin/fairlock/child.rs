//! Running the user's command while a lock or a leadership is held: the
//! signals passed on to it, SIGTERM (then SIGKILL) when the hold is lost,
//! the release when it ends, and the exit code. `fairlock lock` and
//! `fairlock elect` share it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use async_trait::async_trait;
use fairlock::{Error, Leadership, LockGuard, LossCause, MultiGuard};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exit::{self, report};

/// The signals `fairlock` handles: while waiting they cancel the wait,
/// while the command runs they are passed on to it.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// What the command runs under: a lock's guard or a leadership.
#[async_trait]
pub trait Hold: Send + Sync {
    /// Its name in messages: "the lock", "the leadership".
    const NOUN: &'static str;
    /// Completes when the hold is lost.
    async fn lost(&self);
    /// Why it was lost.
    fn loss_cause(&self) -> Option<LossCause>;
    /// Unlocks, or resigns.
    async fn release(self) -> fairlock::Result<()>;
}

#[async_trait]
impl Hold for LockGuard {
    const NOUN: &'static str = "the lock";
    async fn lost(&self) {
        LockGuard::lost(self).await;
    }
    fn loss_cause(&self) -> Option<LossCause> {
        LockGuard::loss_cause(self)
    }
    async fn release(self) -> fairlock::Result<()> {
        self.unlock().await
    }
}

#[async_trait]
impl Hold for MultiGuard {
    const NOUN: &'static str = "a lock";
    async fn lost(&self) {
        MultiGuard::lost(self).await;
    }
    fn loss_cause(&self) -> Option<LossCause> {
        MultiGuard::loss_cause(self).map(|(_, cause)| cause)
    }
    async fn release(self) -> fairlock::Result<()> {
        self.unlock().await
    }
}

#[async_trait]
impl Hold for Leadership {
    const NOUN: &'static str = "the leadership";
    async fn lost(&self) {
        Leadership::lost(self).await;
    }
    fn loss_cause(&self) -> Option<LossCause> {
        Leadership::loss_cause(self)
    }
    async fn release(self) -> fairlock::Result<()> {
        self.resign().await
    }
}

/// The command to run under a hold: its argv and environment, and how
/// long it has to end after SIGTERM before SIGKILL.
pub struct Child<'a> {
    pub cmd: &'a [String],
    pub env: Vec<(&'static str, String)>,
    pub kill_after: Duration,
    /// What was held, for the loss message ("lock k", "leadership of k").
    pub what: String,
}

/// Runs `child` while `hold` is held; returns the exit code: the
/// command's, or [`exit::LOST`] if the hold was lost while it ran.
pub async fn run_while_held<H: Hold>(hold: H, child: Child<'_>, signals: &mut Signals) -> u8 {
    let name = &child.cmd[0];
    let mut command = tokio::process::Command::new(name);
    command
        .args(&child.cmd[1..])
        .envs(child.env.iter().cloned());
    let mut process = match command.spawn() {
        Ok(process) => process,
        Err(e) => {
            let _ = hold.release().await;
            eprintln!("fairlock: cannot run {name}: {e}");
            return if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::NOT_EXECUTABLE
            };
        }
    };
    let pid = process.id();
    let outcome = {
        let lost = hold.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                status = process.wait() => break status.map(Ok),
                sig = signals.recv() => send(pid, sig),
                () = &mut lost => break Ok(Err(())),
            }
        }
    };
    match outcome {
        Ok(Ok(status)) => match hold.release().await {
            Ok(()) => exit_code(status),
            Err(e @ Error::LockLost { .. }) => {
                report(&e);
                eprintln!(
                    "fairlock: {name} finished, but {} was not held to the end",
                    H::NOUN
                );
                exit::LOST
            }
            Err(e) => {
                // The release goes on failing in the background until the
                // lease ends; the command's own outcome is what counts.
                report(&e);
                exit_code(status)
            }
        },
        Ok(Err(())) => {
            let cause = hold.loss_cause().unwrap_or(LossCause::Unspecified);
            eprintln!(
                "fairlock: {} was lost while {name} ran: {cause}; sending SIGTERM",
                child.what
            );
            send(pid, libc::SIGTERM);
            let status = tokio::select! {
                status = process.wait() => status.ok(),
                () = tokio::time::sleep(child.kill_after) => {
                    eprintln!("fairlock: {name} still running after {:?}; sending SIGKILL", child.kill_after);
                    send(pid, libc::SIGKILL);
                    process.wait().await.ok()
                }
            };
            drop(hold);
            if let Some(status) = status {
                eprintln!("fairlock: {name} ended: {status}");
            }
            exit::LOST
        }
        Err(e) => {
            eprintln!("fairlock: waiting for {name} failed: {e}");
            let _ = hold.release().await;
            exit::UNAVAILABLE
        }
    }
}

/// A shell's exit code for a finished command.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => 128 + u8::try_from(sig & 0x7f).unwrap_or(0),
        _ => 1,
    }
}

/// Sends `sig` to the child, if it is still there.
pub fn send(pid: Option<u32>, sig: i32) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
    // own child, which we have not reaped yet (so it cannot be reused).
    unsafe {
        libc::kill(pid, sig);
    }
}
