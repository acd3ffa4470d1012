//! Command-line parsing: global options anywhere before the command to run,
//! then one subcommand with its own options.

use std::path::PathBuf;
use std::time::Duration;

use fairlock::parse_duration;

use crate::exit;

pub const HELP: &str = "\
fairlock: run commands under a distributed lock held in etcd or Redis

USAGE:
    fairlock [GLOBAL OPTIONS] lock [OPTIONS] KEY [--] CMD [ARGS...]
    fairlock [GLOBAL OPTIONS] status [KEY] [--json]
    fairlock [GLOBAL OPTIONS] demo [--processes P] [--tasks T] [--svg FILE]

COMMANDS:
    lock      Wait for the lock on KEY (in arrival order unless --unfair), run
              CMD while holding it, release it when CMD ends; exit with CMD's
              status. CMD gets FAIRLOCK_KEY and FAIRLOCK_TOKEN (the fencing
              token) in its environment.
    status    Show each lock under the prefix (or just KEY): holder, fencing
              token, age, and the queue in order.
    demo      The ordering demo: P processes x T tasks ask for one lock, fair
              mode then unfair mode; prints every grant and a verdict.

GLOBAL OPTIONS (before or after the subcommand):
    --endpoints E1,E2   etcd endpoints (host:port), or redis:// URLs: one is a single
                        Redis, several are Redlock over independent masters (unfair
                        mode only) [env FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379]
    --prefix P          key prefix of all locks [env FAIRLOCK_PREFIX, default
                        /fairlock/ on etcd, fairlock: on Redis]
    --cacert FILE       trust the CA certificates in FILE (PEM) for https:// and
                        rediss:// endpoints, instead of the system's roots
                        [env FAIRLOCK_CACERT]
    --cert FILE         client certificate (PEM) for mutual TLS [env FAIRLOCK_CERT]
    --key FILE          the client certificate's key (PEM) [env FAIRLOCK_KEY]
    --user NAME         etcd user, or Redis ACL user; the password comes from
                        FAIRLOCK_PASSWORD (NAME:PASSWORD also works, but shows it
                        to other local users) [env FAIRLOCK_USER]
    -h, --help          this help
    -V, --version       the version

LOCK OPTIONS:
    --unfair                 take the lock as soon as it is free, not in arrival order
    --nonblock, -n           if the lock is held, do not wait: exit at once with the
                             conflict code, without running CMD
    --timeout DUR, -w DUR    give up after waiting DUR: exit with the conflict code
    --conflict-exit-code N   the conflict code, 0-255 [default 75]
    --ttl DUR                session lease TTL: how long a crashed holder keeps the
                             lock [env FAIRLOCK_TTL, default 10s, at least 2s on
                             etcd, 1s on Redis]
    --kill-after DUR         when the lock is lost while CMD runs, send SIGKILL this
                             long after SIGTERM [default 10s]

STATUS OPTIONS:
    --json    one JSON object per lock, one per line

DEMO OPTIONS:
    --processes P     worker processes [default 3]
    --tasks T         tasks per process [default 8]
    --interval-ms I   time between arrivals [default 40]
    --hold-ms H       how long each task holds the lock [default 60]
    --mode M          both, fair or unfair [default both]
    --svg FILE        also write a timeline picture (SVG) of both runs

DURATIONS: 500ms, 10s, 2m, or plain seconds.

EXIT STATUS (lock):
    CMD's own exit status (128+N when CMD was killed by signal N), or
      2   usage error
     69   etcd or Redis unreachable or failing, or TLS failed (untrusted or
          expired certificate, wrong server name, client certificate missing)
     77   authentication failed (wrong user or password) or permission denied
          (the user's etcd role or Redis ACL does not cover the prefix)
     75   the lock was held (--nonblock) or the wait timed out (--timeout);
          settable with --conflict-exit-code
     76   the lock was lost while CMD ran (lease expired, servers unreachable
          past the TTL): CMD got SIGTERM (SIGKILL after --kill-after)
    127   CMD not found; 126 CMD not executable
    130, 143  fairlock got SIGINT or SIGTERM while waiting (queue entry removed)

EXAMPLES:
    fairlock lock backups -- ./backup.sh --full
    fairlock --endpoints 10.0.0.1:2379,10.0.0.2:2379 lock -n --ttl 30s db-migrate -- make migrate
    fairlock lock --timeout 2m --conflict-exit-code 0 nightly -- ./report.sh
    fairlock status
    fairlock status backups --json
    fairlock --endpoints redis://127.0.0.1:6379 lock backups -- ./backup.sh
    fairlock demo --processes 3 --tasks 8 --svg ordering.svg
";

/// Options that apply to every subcommand.
#[derive(Clone, Debug, Default)]
pub struct Global {
    pub endpoints: Option<String>,
    pub prefix: Option<String>,
    pub cacert: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub user: Option<String>,
}

#[derive(Debug)]
pub enum Command {
    Lock(LockArgs),
    Status(StatusArgs),
    Demo(DemoArgs),
    Help,
    Version,
}

#[derive(Debug)]
pub struct LockArgs {
    pub fair: bool,
    pub nonblock: bool,
    pub timeout: Option<Duration>,
    pub ttl: Option<Duration>,
    pub conflict_code: u8,
    pub kill_after: Duration,
    pub key: String,
    pub cmd: Vec<String>,
}

#[derive(Debug)]
pub struct StatusArgs {
    pub key: Option<String>,
    pub json: bool,
}

#[derive(Clone, Debug)]
pub struct DemoArgs {
    pub processes: u64,
    pub tasks: u64,
    pub interval_ms: u64,
    pub hold_ms: u64,
    pub mode: String,
    pub svg: Option<PathBuf>,
    /// Internal: run as worker process N of a demo.
    pub worker: Option<u64>,
    pub start_ms: u64,
}

/// A usage error: what was wrong, said to the user.
#[derive(Debug)]
pub struct Usage(pub String);

fn usage<T>(msg: impl Into<String>) -> Result<T, Usage> {
    Err(Usage(msg.into()))
}

/// Splits `--flag=value` into its parts.
fn split_flag(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
        _ => (arg, None),
    }
}

struct Args {
    items: std::vec::IntoIter<String>,
}

impl Args {
    fn value(&mut self, flag: &str, inline: Option<&str>) -> Result<String, Usage> {
        match inline {
            Some(v) => Ok(v.to_owned()),
            None => self
                .items
                .next()
                .map_or_else(|| usage(format!("{flag} needs a value")), Ok),
        }
    }
}

fn duration(flag: &str, v: &str) -> Result<Duration, Usage> {
    parse_duration(v).map_err(|e| Usage(format!("{flag}: {e}")))
}

fn number(flag: &str, v: &str) -> Result<u64, Usage> {
    v.parse()
        .map_err(|_| Usage(format!("{flag}: {v:?} is not a whole number")))
}

/// Parses the arguments after the program name.
pub fn parse(argv: Vec<String>) -> Result<(Global, Command), Usage> {
    let mut global = Global::default();
    let mut args = Args {
        items: argv.into_iter(),
    };
    let mut sub: Option<String> = None;
    let mut rest: Vec<(String, Option<String>)> = Vec::new();
    let mut positional: Vec<String> = Vec::new();
    let mut cmd: Vec<String> = Vec::new();
    while let Some(arg) = args.items.next() {
        let (flag, inline) = split_flag(&arg);
        match flag {
            "--endpoints" => global.endpoints = Some(args.value(flag, inline)?),
            "--prefix" => global.prefix = Some(args.value(flag, inline)?),
            "--cacert" => global.cacert = Some(args.value(flag, inline)?),
            "--cert" => global.cert = Some(args.value(flag, inline)?),
            "--key" => global.key = Some(args.value(flag, inline)?),
            "--user" => global.user = Some(args.value(flag, inline)?),
            "-h" | "--help" => return Ok((global, Command::Help)),
            "-V" | "--version" => return Ok((global, Command::Version)),
            "--" => {
                cmd.extend(args.items.by_ref());
            }
            f if f.starts_with('-') && f.len() > 1 => {
                let takes_value = matches!(
                    f,
                    "--timeout"
                        | "-w"
                        | "--ttl"
                        | "--conflict-exit-code"
                        | "-E"
                        | "--kill-after"
                        | "--processes"
                        | "--tasks"
                        | "--interval-ms"
                        | "--hold-ms"
                        | "--mode"
                        | "--svg"
                        | "--worker"
                        | "--start-ms"
                );
                let value = if takes_value {
                    Some(args.value(f, inline)?)
                } else if inline.is_some() {
                    return usage(format!("{f} takes no value"));
                } else {
                    None
                };
                rest.push((f.to_owned(), value));
            }
            _ if sub.is_none() => sub = Some(arg),
            _ if sub.as_deref() == Some("lock") && !positional.is_empty() => {
                // `lock KEY CMD ARGS...` without `--`: the rest is the command.
                cmd.push(arg);
                cmd.extend(args.items.by_ref());
            }
            _ => positional.push(arg),
        }
    }
    let Some(sub) = sub else {
        return usage("no command given: use lock, status or demo");
    };
    let command = match sub.as_str() {
        "lock" => Command::Lock(lock_args(rest, positional, cmd)?),
        "status" => {
            let mut json = false;
            for (flag, _) in rest {
                match flag.as_str() {
                    "--json" => json = true,
                    f => return usage(format!("status does not take {f}")),
                }
            }
            if positional.len() > 1 || !cmd.is_empty() {
                return usage("status takes at most one KEY");
            }
            let key = positional.pop();
            if key.as_deref() == Some("") {
                return usage("KEY is empty; name the lock, e.g. `fairlock status backups`");
            }
            Command::Status(StatusArgs { key, json })
        }
        "demo" => Command::Demo(demo_args(rest, &positional, &cmd)?),
        "help" => Command::Help,
        other => {
            return usage(format!(
                "unknown command {other:?}: use lock, status or demo"
            ));
        }
    };
    Ok((global, command))
}

fn lock_args(
    flags: Vec<(String, Option<String>)>,
    positional: Vec<String>,
    cmd: Vec<String>,
) -> Result<LockArgs, Usage> {
    let mut a = LockArgs {
        fair: true,
        nonblock: false,
        timeout: None,
        ttl: None,
        conflict_code: exit::CONFLICT,
        kill_after: Duration::from_secs(10),
        key: String::new(),
        cmd,
    };
    for (flag, value) in flags {
        let v = value.unwrap_or_default();
        match flag.as_str() {
            "--unfair" => a.fair = false,
            "--fair" => a.fair = true,
            "--nonblock" | "-n" => a.nonblock = true,
            "--timeout" | "-w" => a.timeout = Some(duration(&flag, &v)?),
            "--ttl" => a.ttl = Some(duration(&flag, &v)?),
            "--kill-after" => a.kill_after = duration(&flag, &v)?,
            "--conflict-exit-code" | "-E" => {
                a.conflict_code = v
                    .parse()
                    .map_err(|_| Usage(format!("{flag}: {v:?} is not an exit code (0-255)")))?;
            }
            f => return usage(format!("lock does not take {f}")),
        }
    }
    let mut positional = positional.into_iter();
    let Some(key) = positional.next() else {
        return usage("lock needs a KEY and a command: fairlock lock KEY -- CMD [ARGS...]");
    };
    // `lock KEY CMD` with CMD caught as a positional before `--`.
    a.cmd.splice(0..0, positional);
    if key.is_empty() {
        return usage("KEY is empty; name the lock, e.g. `fairlock lock backups -- CMD`");
    }
    if a.cmd.is_empty() {
        return usage(format!(
            "no command to run under lock {key:?}: fairlock lock {key} -- CMD [ARGS...]"
        ));
    }
    a.key = key;
    Ok(a)
}

fn demo_args(
    flags: Vec<(String, Option<String>)>,
    positional: &[String],
    cmd: &[String],
) -> Result<DemoArgs, Usage> {
    let mut d = DemoArgs {
        processes: 3,
        tasks: 8,
        interval_ms: 40,
        hold_ms: 60,
        mode: "both".into(),
        svg: None,
        worker: None,
        start_ms: 0,
    };
    if let Some(extra) = positional.first().or(cmd.first()) {
        return usage(format!("demo takes no argument {extra:?}"));
    }
    for (flag, value) in flags {
        let v = value.unwrap_or_default();
        match flag.as_str() {
            "--processes" => d.processes = number(&flag, &v)?,
            "--tasks" => d.tasks = number(&flag, &v)?,
            "--interval-ms" => d.interval_ms = number(&flag, &v)?,
            "--hold-ms" => d.hold_ms = number(&flag, &v)?,
            "--mode" => d.mode = v,
            "--svg" => d.svg = Some(PathBuf::from(v)),
            "--worker" => d.worker = Some(number(&flag, &v)?),
            "--start-ms" => d.start_ms = number(&flag, &v)?,
            f => return usage(format!("demo does not take {f}")),
        }
    }
    if !["both", "fair", "unfair"].contains(&d.mode.as_str()) {
        return usage(format!(
            "--mode must be both, fair or unfair, not {:?}",
            d.mode
        ));
    }
    if d.processes == 0 || d.tasks == 0 || d.processes * d.tasks > 1000 {
        return usage("--processes and --tasks must be at least 1, with at most 1000 tasks in all");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<(Global, Command), Usage> {
        if s.is_empty() {
            return parse(Vec::new());
        }
        parse(s.split(' ').map(str::to_owned).collect())
    }

    #[test]
    fn global_options_before_or_after_the_subcommand() {
        for line in [
            "--endpoints a:1 lock k -- true",
            "lock --endpoints=a:1 k -- true",
        ] {
            let (g, c) = parse_str(line).expect(line);
            assert_eq!(g.endpoints.as_deref(), Some("a:1"));
            let Command::Lock(l) = c else {
                panic!("{line}")
            };
            assert_eq!(
                (l.key.as_str(), l.cmd.as_slice()),
                ("k", &["true".to_owned()][..])
            );
        }
    }

    #[test]
    fn the_command_keeps_its_own_flags() {
        let (_, c) = parse_str("lock -n k -- ls --all -- x").expect("parse");
        let Command::Lock(l) = c else { panic!() };
        assert!(l.nonblock && l.fair);
        assert_eq!(l.cmd, ["ls", "--all", "--", "x"]);
        let (_, c) = parse_str("lock k ls --prefix").expect("parse");
        let Command::Lock(l) = c else { panic!() };
        assert_eq!(l.cmd, ["ls", "--prefix"]);
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for (line, says) in [
            ("lock k", "no command"),
            ("lock", "needs a KEY"),
            ("lock  -- true", "KEY is empty"),
            ("lock --timeout soon k -- true", "not a duration"),
            (
                "lock --conflict-exit-code 300 k -- true",
                "not an exit code",
            ),
            ("frob", "unknown command"),
            ("", "no command given"),
            ("status a b", "at most one KEY"),
            ("demo --mode odd", "--mode"),
        ] {
            let err = parse_str(line).expect_err(line);
            assert!(err.0.contains(says), "{line:?}: {}", err.0);
        }
    }
}
