//! Command-line parsing (clap derive): global options before or after the
//! subcommand, then one subcommand with its own options and `--help`.

pub mod election_args;
mod help;
pub mod lock_args;

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand};

use fairlock::etcd::Layout;
use fairlock::redis::ReplicaAcks;

use crate::exit;
use election_args::{ELECT_AFTER_HELP, ElectArgs, LeaderArgs, check_elect, check_leader};
use help::{AFTER_HELP, LOCK_AFTER_HELP};
use lock_args::{Hold, LockArgs};

/// fairlock: run commands under a distributed lock held in etcd or Redis.
#[derive(Debug, Parser)]
#[command(
    name = "fairlock",
    version,
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten, next_help_heading = "Global options")]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options that apply to every subcommand.
#[derive(Clone, Debug, Default, Args)]
pub struct Global {
    /// etcd endpoints (host:port), or redis:// URLs: one is a single Redis,
    /// several are Redlock over independent masters (unfair mode only)
    /// [env FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379]
    #[arg(long, global = true, value_name = "E1,E2")]
    pub endpoints: Option<String>,
    /// Key prefix of all locks [env FAIRLOCK_PREFIX, default /fairlock/ on
    /// etcd, fairlock: on Redis]
    #[arg(long, global = true, value_name = "P")]
    pub prefix: Option<String>,
    /// Session lease TTL: how long a crashed holder keeps the lock [env
    /// FAIRLOCK_TTL, default 10s, at least 2s on etcd, 1s on Redis]
    #[arg(long, global = true, value_name = "DUR", value_parser = duration)]
    pub ttl: Option<Duration>,
    /// How long connecting may take; on etcd, endpoints that refuse
    /// connections are retried that long, to wait for a server that is
    /// starting [env FAIRLOCK_CONNECT_TIMEOUT, default 5s, etcd gives up
    /// after about 1s when every endpoint refuses]
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = duration,
        env = "FAIRLOCK_CONNECT_TIMEOUT",
        hide_env = true
    )]
    pub connect_timeout: Option<Duration>,
    /// Redis: how many replicas must acknowledge a grant or an extend
    /// before it counts: all (every replica the sentinels or the cluster
    /// list as up), off (accept a failover's window), or a number [env
    /// FAIRLOCK_REPLICA_ACKS, default all]
    #[arg(
        long,
        global = true,
        value_name = "all|off|N",
        value_parser = replica_acks,
        env = "FAIRLOCK_REPLICA_ACKS",
        hide_env = true
    )]
    pub replica_acks: Option<ReplicaAcks>,
    /// Redis: how long a dataset that lost fairlock's data (a restart
    /// without persistence, a flush) grants nothing, so that locks it
    /// forgot expire first; 0 turns it off [env FAIRLOCK_DATA_LOSS_WAIT,
    /// default the TTL]
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = duration,
        env = "FAIRLOCK_DATA_LOSS_WAIT",
        hide_env = true
    )]
    pub data_loss_wait: Option<Duration>,
    /// etcd: which keys to lock on: fairlock (its own, every primitive)
    /// or etcd (etcd's own, shared with etcdctl lock and Go's concurrency
    /// package: fair locks and elections) [env FAIRLOCK_LAYOUT, default
    /// fairlock]
    #[arg(
        long,
        global = true,
        value_name = "fairlock|etcd",
        value_parser = layout,
        env = "FAIRLOCK_LAYOUT",
        hide_env = true
    )]
    pub layout: Option<Layout>,
    /// Trust the CA certificates in FILE (PEM) for https:// and rediss://
    /// endpoints, instead of the system's roots [env FAIRLOCK_CACERT]
    #[arg(long, global = true, value_name = "FILE")]
    pub cacert: Option<String>,
    /// Client certificate (PEM) for mutual TLS [env FAIRLOCK_CERT]
    #[arg(long, global = true, value_name = "FILE")]
    pub cert: Option<String>,
    /// The client certificate's key (PEM) [env FAIRLOCK_CLIENT_KEY]
    #[arg(id = "client_key", long = "key", global = true, value_name = "FILE")]
    pub client_key: Option<String>,
    /// etcd user, or Redis ACL user; the password comes from
    /// FAIRLOCK_PASSWORD (NAME:PASSWORD also works, but shows it to other
    /// local users) [env FAIRLOCK_USER]
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Log what the library does on stderr: -v fairlock's debug events
    /// (grants with key and fencing token, queueing, retries, losses), -vv
    /// also the client libraries'. RUST_LOG overrides the filter.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for the lock on KEY (in arrival order unless --unfair), or on
    /// every KEY at once, run CMD while holding it, release it when CMD
    /// ends; exit with CMD's status.
    #[command(
        after_help = LOCK_AFTER_HELP,
        override_usage = concat!(
            "fairlock [GLOBAL OPTIONS] lock [OPTIONS] KEY [--] CMD [ARGS...]\n",
            "       fairlock [GLOBAL OPTIONS] lock [OPTIONS] KEY1 KEY2... -- CMD [ARGS...]"
        )
    )]
    Lock(LockArgs),
    /// Show each lock under the prefix (or just KEY): holder, fencing
    /// token, age, and the queue in order.
    Status(StatusArgs),
    /// The ordering demo (etcd): P processes each ask for one lock T times,
    /// again as soon as they release, fair mode then unfair mode; prints
    /// every grant against the order etcd saw the requests arrive, a
    /// verdict per mode and a summary.
    Demo(DemoArgs),
    /// Campaign for election NAME (in arrival order), run CMD while leading,
    /// resign when CMD ends; exit with CMD's status.
    #[command(
        after_help = ELECT_AFTER_HELP,
        override_usage = "fairlock [GLOBAL OPTIONS] elect [OPTIONS] NAME [--] CMD [ARGS...]"
    )]
    Elect(ElectArgs),
    /// Show the leader of election NAME: its value, term, host and pid.
    Leader(LeaderArgs),
    /// Print a completion script for SHELL (source it, or install it where
    /// your shell looks for completions).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this lock
    #[arg(value_name = "KEY")]
    pub key: Option<String>,
    /// One JSON object per lock, one per line
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Redraw the view every second (holder, token, held for, queue with
    /// wait times) until Ctrl-C
    #[arg(long)]
    pub watch: bool,
}

#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Worker processes
    #[arg(long, value_name = "P", default_value_t = 3)]
    pub processes: u64,
    /// Requests per process, each made as soon as the previous one is
    /// released
    #[arg(long, value_name = "T", default_value_t = 8)]
    pub tasks: u64,
    /// Time between the processes' first requests, in milliseconds
    #[arg(long, value_name = "I", default_value_t = 40)]
    pub interval_ms: u64,
    /// How long each request holds the lock, in milliseconds
    #[arg(long, value_name = "H", default_value_t = 60)]
    pub hold_ms: u64,
    /// Which modes to run
    #[arg(long, value_name = "M", default_value = "both",
          value_parser = ["both", "fair", "unfair"])]
    pub mode: String,
    /// Also write a timeline picture (SVG) of the runs: a row per request,
    /// from its arrival through its wait to its hold
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Internal: run as worker process N of a demo.
    #[arg(long, hide = true)]
    pub worker: Option<u64>,
    /// Internal: the demo's start time.
    #[arg(long, hide = true, default_value_t = 0)]
    pub start_ms: u64,
}

fn duration(v: &str) -> Result<Duration, String> {
    fairlock::parse_duration(v)
}

fn layout(v: &str) -> Result<Layout, String> {
    Layout::parse(v).map_err(|e| e.to_string())
}

fn replica_acks(v: &str) -> Result<ReplicaAcks, String> {
    ReplicaAcks::parse(v).map_err(|e| e.to_string())
}

/// Parses the arguments (program name first); `Err` is clap's error,
/// including `--help` and `--version`, which exit 0.
pub fn parse<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv: Vec<T> = argv.into_iter().collect();
    let dashes = argv
        .iter()
        .filter(|a| Into::<std::ffi::OsString>::into((*a).clone()) == "--")
        .count();
    let mut cli = Cli::try_parse_from(argv)?;
    if let Command::Lock(a) = &mut cli.command {
        a.split_keys(dashes);
    }
    check(&cli.command)?;
    Ok(cli)
}

/// What clap cannot say: an empty KEY, a lock without a command, too
/// many demo tasks.
fn check(command: &Command) -> Result<(), clap::Error> {
    let mut cli = Cli::command();
    let mut fail = |sub: &str, kind, msg: String| {
        let sub = cli.find_subcommand_mut(sub).expect("a subcommand");
        Err(sub.error(kind, msg))
    };
    match command {
        Command::Lock(a) => match &a.key {
            None => fail(
                "lock",
                ErrorKind::MissingRequiredArgument,
                "lock needs a KEY and a command: fairlock lock KEY -- CMD [ARGS...]".into(),
            ),
            Some(_) if a.keys().iter().any(|k| k.is_empty()) => fail(
                "lock",
                ErrorKind::InvalidValue,
                "KEY is empty; name the lock, e.g. `fairlock lock backups -- CMD`".into(),
            ),
            Some(_) if !a.more_keys.is_empty() && a.hold() != Hold::Lock => fail(
                "lock",
                ErrorKind::ArgumentConflict,
                "several keys are taken as mutexes only, all at once; --read, --write and \
                 --limit take one KEY"
                    .into(),
            ),
            Some(key) if a.cmd.is_empty() => fail(
                "lock",
                ErrorKind::MissingRequiredArgument,
                format!(
                    "no command to run under lock {key:?}: fairlock lock {key} -- CMD [ARGS...]"
                ),
            ),
            Some(_) => Ok(()),
        },
        Command::Status(a) if a.key.as_deref() == Some("") => fail(
            "status",
            ErrorKind::InvalidValue,
            "KEY is empty; name the lock, e.g. `fairlock status backups`".into(),
        ),
        Command::Elect(a) => match check_elect(a) {
            Some((kind, msg)) => fail("elect", kind, msg),
            None => Ok(()),
        },
        Command::Leader(a) => match check_leader(a) {
            Some((kind, msg)) => fail("leader", kind, msg),
            None => Ok(()),
        },
        Command::Demo(d) if d.processes == 0 || d.tasks == 0 || d.processes * d.tasks > 1000 => {
            fail(
                "demo",
                ErrorKind::ValueValidation,
                "--processes and --tasks must be at least 1, with at most 1000 tasks in all".into(),
            )
        }
        _ => Ok(()),
    }
}

/// Prints a parse error (or the help or version it stands for) and gives
/// the exit code: 0 for help and version, 2 for usage errors. A mistyped
/// command is named as an unknown command, with clap's suggestion.
pub fn report(err: &clap::Error) -> u8 {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() == ErrorKind::InvalidSubcommand {
        let given = match err.get(ContextKind::InvalidSubcommand) {
            Some(ContextValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        eprintln!(
            "fairlock: unknown command {given:?}: use lock, status, elect, leader, demo or completions"
        );
        if let Some(ContextValue::Strings(similar)) = err.get(ContextKind::SuggestedSubcommand) {
            for s in similar {
                eprintln!("  tip: a similar command exists: '{s}'");
            }
        }
        eprintln!("Try 'fairlock --help' for more information.");
        return exit::USAGE;
    }
    let _ = err.print();
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                0
            }
        }
        _ => exit::USAGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Cli, clap::Error> {
        let args = std::iter::once("fairlock").chain(s.split(' ').filter(|a| !a.is_empty()));
        parse(args)
    }

    fn lock(line: &str) -> LockArgs {
        match parse_str(line).expect(line).command {
            Command::Lock(l) => l,
            c => panic!("{line}: {c:?}"),
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_before_or_after_the_subcommand() {
        for line in [
            "--endpoints a:1 lock k -- true",
            "lock --endpoints=a:1 k -- true",
            "lock k --endpoints a:1 -- true",
            "--endpoints b:2 lock --endpoints a:1 k -- true",
        ] {
            let cli = parse_str(line).expect(line);
            assert_eq!(cli.global.endpoints.as_deref(), Some("a:1"), "{line}");
            let Command::Lock(l) = cli.command else {
                panic!("{line}")
            };
            assert_eq!((l.key(), l.cmd.as_slice()), ("k", &["true".to_owned()][..]));
        }
        let cli = parse_str("--key c.pem lock k -- true").expect("--key and KEY");
        assert_eq!(cli.global.client_key.as_deref(), Some("c.pem"));
        let Command::Lock(l) = cli.command else {
            panic!("lock")
        };
        assert_eq!(l.key(), "k");
        let cli = parse_str("--ttl 3s status").expect("ttl before status");
        assert_eq!(cli.global.ttl, Some(Duration::from_secs(3)));
    }

    #[test]
    fn the_command_keeps_its_own_flags() {
        let l = lock("lock -n k -- ls --all -- x");
        assert!(l.nonblock && l.is_fair());
        assert_eq!(l.cmd, ["ls", "--all", "--", "x"]);
        let l = lock("lock k ls --prefix");
        assert_eq!(l.cmd, ["ls", "--prefix"]);
        let l = lock("lock --unfair --fair -E 9 -w 2m k true");
        assert!(l.is_fair());
        assert_eq!(l.run.conflict_code, 9);
        assert_eq!(l.run.timeout, Some(Duration::from_secs(120)));
        assert!(!lock("lock --fair --unfair k true").is_fair());
    }

    #[test]
    fn several_keys_come_before_the_dashes() {
        let l = lock("lock a b c -- ls -- x");
        assert_eq!(
            (l.keys(), l.cmd.as_slice()),
            (
                vec!["a", "b", "c"],
                &["ls".to_owned(), "--".to_owned(), "x".to_owned()][..]
            )
        );
        let l = lock("lock -n a -- ls -- x");
        assert_eq!((l.keys(), l.cmd.len()), (vec!["a"], 3));
        let l = lock("lock a b -- true");
        assert_eq!(
            (l.keys(), l.cmd.as_slice()),
            (vec!["a", "b"], &["true".to_owned()][..])
        );
        let l = lock("lock a ls -l");
        assert_eq!((l.keys(), l.cmd.len()), (vec!["a"], 2));
        let err = parse_str("lock --read a b -- true").expect_err("read of two keys");
        assert!(err.to_string().contains("mutexes only"), "{err}");
        let err = parse_str("lock a b --").expect_err("no command");
        assert!(err.to_string().contains("no command"), "{err}");
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for (line, says) in [
            ("lock k", "no command"),
            ("lock", "needs a KEY"),
            ("lock --timeout soon k -- true", "not a duration"),
            (
                "lock --conflict-exit-code 300 k -- true",
                "not an exit code",
            ),
            ("frob", "unrecognized subcommand"),
            ("status a b", "unexpected argument"),
            ("status --json --watch", "cannot be used with"),
            ("demo --mode odd", "--mode"),
            ("demo --tasks 0", "at least 1"),
            ("--layout etc lock k -- true", "not one fairlock knows"),
        ] {
            let err = parse_str(line).expect_err(line);
            assert_eq!(err.exit_code(), 2, "{line}");
            assert!(err.to_string().contains(says), "{line:?}: {err}");
        }
        let err = parse(["fairlock", "lock", "", "--", "true"]).expect_err("empty key");
        assert!(err.to_string().contains("KEY is empty"), "{err}");
    }

    #[test]
    fn a_mistyped_command_gets_a_suggestion() {
        use clap::error::{ContextKind, ContextValue};
        let err = parse_str("lcok k -- true").expect_err("typo");
        assert_eq!(err.kind(), ErrorKind::InvalidSubcommand);
        let Some(ContextValue::Strings(similar)) = err.get(ContextKind::SuggestedSubcommand) else {
            panic!("no suggestion: {err}")
        };
        assert_eq!(similar, &["lock".to_owned()]);
    }
}
