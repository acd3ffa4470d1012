//! `fairlock elect` and `fairlock leader`, driven as a user would: the
//! built binary against a real etcd that the tests start (see
//! tests/support).
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use support::cli::{BIN, fairlock, run, text};
use support::signal;

fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// `fairlock elect [extra] NAME` running a command that prints `LEADING
/// <value of $FAIRLOCK_TERM>` and waits for a line on stdin; returns once
/// it leads, with the rest of its output.
fn lead(prefix: &str, name: &str, extra: &[&str]) -> (Child, u64, Lines<BufReader<ChildStdout>>) {
    let mut child = fairlock(prefix)
        .arg("elect")
        .args(extra)
        .args([
            name,
            "--",
            "sh",
            "-c",
            "echo LEADING $FAIRLOCK_TERM; read _",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("output").expect("line");
    let term = first
        .strip_prefix("LEADING ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    (child, term, lines)
}

fn resign(mut leader: Child) -> std::process::ExitStatus {
    writeln!(leader.stdin.as_mut().expect("stdin")).expect("end the command");
    leader.wait().expect("exit")
}

/// Waits until `n` keys are under the election's queue prefix (the
/// leader's value is one).
async fn wait_entries(prefix: &str, name: &str, n: i64) {
    let mut client = support::shared().client().await;
    let queue = format!("{prefix}{name}/_OWNERS_/");
    support::wait_for_count(&mut client, &queue, n, false).await;
}

async fn wait_clean(prefix: &str) {
    let mut client = support::shared().client().await;
    support::wait_for_count(&mut client, prefix, 0, true).await;
}

/// The command runs while leading with the election's name and term in its
/// environment, and `fairlock elect` exits with its status; `fairlock
/// leader` shows the leader (text and JSON) while it runs and nobody after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_command_and_leader_shows_it() {
    let prefix = support::unique_prefix("cli-elect");
    let (leader, term, _lines) = lead(&prefix, "web", &["--value", "10.0.0.7:80"]);
    let out = run(fairlock(&prefix).args(["leader", "web"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("web: 10.0.0.7:80 (term {term}, ")),
        "{shown}"
    );
    let out = run(fairlock(&prefix).args(["leader", "web", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["name"], "web");
    assert_eq!(json["leader"]["value"], "10.0.0.7:80");
    assert_eq!(json["leader"]["token"], term);
    assert!(json["leader"]["pid"].is_u64() && json["leader"]["since_ms"].is_u64());
    let out = run(fairlock(&prefix).args(["status", "web"]));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("election: led by 10.0.0.7:80 (term {term})")),
        "{shown}"
    );
    let out = run(fairlock(&prefix).args(["status", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["leader"]["value"], "10.0.0.7:80", "{json}");
    assert_eq!(json["leader"]["token"], term, "{json}");
    assert!(resign(leader).success());
    let out = run(fairlock(&prefix).args(["leader", "web"]));
    assert_eq!(text(&out.stdout).trim(), "web: no leader");
    let out = run(fairlock(&prefix).args([
        "elect",
        "web",
        "--",
        "sh",
        "-c",
        r#"test "$FAIRLOCK_ELECTION $FAIRLOCK_TOKEN" = "web $FAIRLOCK_TERM" && exit 7"#,
    ]));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    wait_clean(&prefix).await;
}

/// Candidates are elected in turn (the value given as `--value` or as
/// PROPOSAL); `elect --listen` prints the leader and every change until
/// SIGINT (exit 0); a candidate not elected within
/// `--timeout` exits with the conflict code without running its command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_take_turns_and_watchers_follow() {
    let prefix = support::unique_prefix("cli-turns");
    let mut watcher = fairlock(&prefix)
        .args(["elect", "--listen", "e"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut watched = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let mut next_watched = || watched.next().expect("watch output").expect("line");
    assert_eq!(next_watched(), "e: no leader");
    let (first, t1, _) = lead(&prefix, "e", &["--value", "one"]);
    assert!(next_watched().starts_with(&format!("e: one (term {t1}, ")));
    let out = run(fairlock(&prefix).args(["elect", "-w", "300ms", "e", "--", "false"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not elected within"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("led by one"), "{}", stderr(&out));
    let second = fairlock(&prefix)
        .args(["elect", "e", "two", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_entries(&prefix, "e", 2).await; // one's value and two's entry
    assert!(resign(first).success());
    let out = second.wait_with_output().expect("exit");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut rest = Vec::new();
    while rest
        .last()
        .is_none_or(|l: &String| !l.starts_with("e: two"))
    {
        rest.push(next_watched());
    }
    assert!(rest.len() <= 2, "{rest:?}"); // maybe nobody, then two
    assert_eq!(next_watched(), "e: no leader");
    signal(watcher.id(), "-INT");
    assert_eq!(watcher.wait().expect("exit").code(), Some(0));
    wait_clean(&prefix).await;
}

/// A leader paused past its TTL loses its leadership: on waking, its
/// command gets SIGTERM and `fairlock elect` exits 76 naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_stops_its_command_and_exits_76() {
    let prefix = support::unique_prefix("cli-elect-pause");
    let mut leader = fairlock(&prefix)
        .args(["--ttl", "2s", "elect", "e", "--", "sh", "-c"])
        .arg("trap 'echo TERMINATED; exit 0' TERM; echo STARTED; while :; do sleep 0.05; done")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(leader.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "STARTED");
    signal(leader.id(), "-STOP");
    // Another candidate is elected: the paused leader's lease expired.
    let out = run(fairlock(&prefix).args(["elect", "e", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    signal(leader.id(), "-CONT");
    assert_eq!(lines.next().expect("line").expect("read"), "TERMINATED");
    let out = leader.wait_with_output().expect("exit");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("leadership of e was lost"), "{err}");
    assert!(err.contains("lease"), "{err}");
    wait_clean(&prefix).await;
}

/// SIGINT while waiting to be elected leaves the line (exit 130).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_waiting_leaves_the_line() {
    let prefix = support::unique_prefix("cli-elect-int");
    let (leader, _, _) = lead(&prefix, "e", &[]);
    let waiter = fairlock(&prefix)
        .args(["elect", "e", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_entries(&prefix, "e", 2).await;
    signal(waiter.id(), "-INT");
    let out = waiter.wait_with_output().expect("exit");
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(stderr(&out).contains("left the line"), "{}", stderr(&out));
    assert!(resign(leader).success());
    wait_clean(&prefix).await;
}

/// Bad input is a usage error (exit 2) saying what is wrong, before
/// anything is written: no name, an empty one, no command, a value over
/// the limit, a Redis endpoint (no elections there).
#[test]
fn bad_input_is_a_usage_error() {
    let prefix = support::unique_prefix("cli-elect-bad");
    let big = "x".repeat(fairlock::MAX_VALUE_LEN + 1);
    for (args, says) in [
        (vec!["elect"], "needs a NAME"),
        (vec!["elect", "", "--", "true"], "NAME is empty"),
        (vec!["elect", "e"], "no command"),
        (vec!["elect", "e", "p"], "no command"),
        (
            vec!["elect", "--listen", "e", "--", "true"],
            "runs no command",
        ),
        (vec!["leader", ""], "NAME is empty"),
        (vec!["elect", "a/_OWNERS_", "--", "true"], "reserved"),
        (
            vec!["elect", "--value", big.as_str(), "e", "--", "true"],
            "at most",
        ),
        (vec!["elect", "-w", "soon", "e", "--", "true"], "duration"),
    ] {
        let out = run(fairlock(&prefix).args(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let out = run(Command::new(BIN).args(["elect", "--help"]));
    let help = text(&out.stdout);
    assert!(
        help.contains("--value") && help.contains("EXIT STATUS"),
        "{help}"
    );
}
