//! The command lines of `fairlock elect` and `fairlock leader`, their
//! checks and long help.

use clap::Args;
use clap::error::ErrorKind;

use super::lock_args::RunWhileHeld;

/// What `fairlock elect --help` shows after the options.
pub const ELECT_AFTER_HELP: &str = "\
Candidates are elected in arrival order (an election is a fair lock on
NAME). PROPOSAL is what observers see of this candidate while it leads
(default HOST:PID). CMD gets FAIRLOCK_ELECTION (NAME), FAIRLOCK_TERM and
FAIRLOCK_TOKEN (the term: it grows with every new leader, fence writes
with it) in its environment. `fairlock elect --listen NAME` (or `fairlock
leader NAME --watch`) prints the leader's value at every change, and
`no leader` when the seat is empty, until Ctrl-C or stdout closes.

EXIT STATUS:
    CMD's own exit status (128+N when CMD was killed by signal N), or
      2   usage error, or a backend without elections (Redlock)
     69   etcd or Redis unreachable or failing, or TLS failed
     77   authentication failed or permission denied
     75   not elected within --timeout; settable with --conflict-exit-code
     76   the leadership was lost while CMD ran (no renewal for the TTL, the
          lease ended, or the election's lock key deleted: the message says
          which): CMD got SIGTERM (SIGKILL after --kill-after)
    127   CMD not found; 126 CMD not executable
    130, 143  fairlock got SIGINT or SIGTERM while waiting (left the line)

EXAMPLES:
    fairlock elect scheduler -- ./scheduler --serve
    fairlock elect --timeout 5m api-primary 10.0.0.7:8080 -- ./api
    fairlock elect --listen --json api-primary";

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// What observers see of this candidate while it leads (the same as
    /// PROPOSAL) [default: HOST:PID]
    #[arg(long, value_name = "V", conflicts_with = "proposal")]
    pub value: Option<String>,
    /// Do not campaign: print the leader's value now and at every change
    /// (`no leader` for an empty seat) until Ctrl-C or stdout closes
    #[arg(long, conflicts_with_all = ["value", "proposal", "timeout"])]
    pub listen: bool,
    /// With --listen: one JSON object per line (name, leader: null for an
    /// empty seat, else value, token, pid, host, since_ms)
    #[arg(long, requires = "listen")]
    pub json: bool,
    #[command(flatten)]
    pub run: RunWhileHeld,
    /// The election's name
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// What observers see of this candidate while it leads [default:
    /// HOST:PID]
    #[arg(value_name = "PROPOSAL")]
    pub proposal: Option<String>,
    /// The command to run while leading, with its arguments, after `--`
    #[arg(value_name = "CMD", num_args = 0.., last = true, allow_hyphen_values = true)]
    pub cmd: Vec<String>,
}

impl ElectArgs {
    /// The name, checked to be there and not empty.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// The value to campaign with, if given (PROPOSAL or --value).
    pub fn proposal(&self) -> Option<&str> {
        self.proposal.as_deref().or(self.value.as_deref())
    }

    /// `elect --listen NAME` as the `leader --watch NAME` it is.
    pub fn listening(&self) -> LeaderArgs {
        LeaderArgs {
            name: self.name().to_string(),
            watch: true,
            json: self.json,
        }
    }
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's name
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Print the leader, then a line for every change, until Ctrl-C
    #[arg(long)]
    pub watch: bool,
    /// One JSON object per line: name, leader (null when nobody leads)
    /// with value, token, pid, host, since_ms
    #[arg(long)]
    pub json: bool,
}

/// What clap cannot say of `elect`: no NAME, an empty one, no command.
pub fn check_elect(a: &ElectArgs) -> Option<(ErrorKind, String)> {
    match &a.name {
        None => Some((
            ErrorKind::MissingRequiredArgument,
            "elect needs a NAME and a command: fairlock elect NAME -- CMD [ARGS...]".into(),
        )),
        Some(name) if name.is_empty() => Some((
            ErrorKind::InvalidValue,
            "NAME is empty; name the election, e.g. `fairlock elect scheduler -- CMD`".into(),
        )),
        Some(_) if a.listen && !a.cmd.is_empty() => Some((
            ErrorKind::ArgumentConflict,
            "--listen runs no command: fairlock elect --listen NAME".into(),
        )),
        Some(name) if a.cmd.is_empty() && !a.listen => Some((
            ErrorKind::MissingRequiredArgument,
            format!(
                "no command to run while leading {name:?}: fairlock elect {name} [PROPOSAL] -- CMD [ARGS...]"
            ),
        )),
        Some(_) => None,
    }
}

/// What clap cannot say of `leader`: an empty NAME.
pub fn check_leader(a: &LeaderArgs) -> Option<(ErrorKind, String)> {
    a.name.is_empty().then(|| {
        (
            ErrorKind::InvalidValue,
            "NAME is empty; name the election, e.g. `fairlock leader scheduler`".into(),
        )
    })
}
