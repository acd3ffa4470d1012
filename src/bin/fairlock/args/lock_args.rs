//! The options of `fairlock lock`: [`LockArgs`], what it holds
//! ([`Hold`]), and the options it shares with `fairlock elect`
//! ([`RunWhileHeld`]).

use std::time::Duration;

use clap::Args;

use crate::exit;

/// What `fairlock lock` and `fairlock elect` share: how long to wait,
/// the exit code when that is too long, and CMD's grace on a loss.
#[derive(Debug, Args)]
pub struct RunWhileHeld {
    /// Give up after waiting DUR (for the lock, or to be elected): exit
    /// with the conflict code
    #[arg(short = 'w', long, value_name = "DUR", value_parser = fairlock::parse_duration)]
    pub timeout: Option<Duration>,
    /// The conflict code, 0-255
    #[arg(
        short = 'E',
        long = "conflict-exit-code",
        value_name = "N",
        default_value_t = exit::CONFLICT,
        value_parser = exit_code
    )]
    pub conflict_code: u8,
    /// When the lock or the leadership is lost while CMD runs, send
    /// SIGKILL this long after SIGTERM
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = fairlock::parse_duration)]
    pub kill_after: Duration,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Take the lock as soon as it is free, not in arrival order
    #[arg(long, overrides_with = "fair")]
    pub unfair: bool,
    /// Take the lock in arrival order (the default)
    #[arg(long, overrides_with = "unfair", hide = true)]
    pub fair: bool,
    /// Hold KEY as a reader of a read/write lock (a shared lock): with
    /// other readers, once no writer holds it or waits ahead
    #[arg(long, visible_alias = "shared", conflicts_with_all = ["write", "limit", "unfair"])]
    pub read: bool,
    /// Hold KEY as the writer of a read/write lock: alone, once the
    /// readers and writers ahead are done
    #[arg(long, conflicts_with_all = ["limit", "unfair"])]
    pub write: bool,
    /// Hold one of N permits of the semaphore KEY: at most N run at once
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "unfair",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub limit: Option<u32>,
    /// With --limit N: hold K of the N permits (1 to N; default 1)
    #[arg(
        long,
        value_name = "K",
        requires = "limit",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub permits: u32,
    /// If the lock is held, do not wait: exit at once with the conflict
    /// code, without running CMD
    #[arg(short, long)]
    pub nonblock: bool,
    #[command(flatten)]
    pub run: RunWhileHeld,
    /// The lock's name (several: `KEY1 KEY2 ... -- CMD` holds them all)
    #[arg(value_name = "KEY")]
    pub key: Option<String>,
    /// The keys after the first (set by `parse`, from the words before
    /// `--`).
    #[arg(skip)]
    pub more_keys: Vec<String>,
    /// The command to run while holding the lock, with its arguments
    /// (after `--` if they start with `-`)
    #[arg(
        value_name = "CMD",
        num_args = 0..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub cmd: Vec<String>,
}

impl LockArgs {
    /// `true` unless `--unfair` (the last of `--fair`/`--unfair` wins).
    pub fn is_fair(&self) -> bool {
        !self.unfair
    }

    /// What to hold: a mutex, a read or write lock, or a permit.
    pub fn hold(&self) -> Hold {
        match (self.read, self.write, self.limit) {
            (true, _, _) => Hold::Read,
            (_, true, _) => Hold::Write,
            (_, _, Some(limit)) => Hold::Permits {
                n: self.permits,
                limit,
            },
            _ => Hold::Lock,
        }
    }

    /// The key, checked to be there and not empty.
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or_default()
    }

    /// Every key named, the first one first.
    pub fn keys(&self) -> Vec<&str> {
        std::iter::once(self.key())
            .chain(self.more_keys.iter().map(String::as_str))
            .collect()
    }

    /// `fairlock lock K1 K2 ... -- CMD`: clap reads `K1` as the key and
    /// the rest as the command; the words before the first `--` that clap
    /// left in the command are more keys. `dashes` counts the `--` in the
    /// whole command line: one more than the command holds means the
    /// first came right after `K1` (clap took it), so the command is all
    /// command (`fairlock lock k -- ls -- x`).
    pub fn split_keys(&mut self, dashes: usize) {
        let in_cmd = self.cmd.iter().filter(|w| *w == "--").count();
        if dashes > in_cmd {
            return;
        }
        if let Some(at) = self.cmd.iter().position(|w| w == "--") {
            let rest = self.cmd.split_off(at + 1);
            self.cmd.pop();
            self.more_keys = std::mem::replace(&mut self.cmd, rest);
        }
    }
}

/// What `fairlock lock` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The mutex (the default).
    Lock,
    /// A read lock (`--read`).
    Read,
    /// A write lock (`--write`).
    Write,
    /// `n` permits of a semaphore with `limit` permits (`--limit N
    /// --permits K`).
    Permits {
        /// How many permits (`--permits`).
        n: u32,
        /// The semaphore's limit (`--limit`).
        limit: u32,
    },
}

fn exit_code(v: &str) -> Result<u8, String> {
    v.parse()
        .map_err(|_| format!("{v:?} is not an exit code (0-255)"))
}
