//! The `fairlock` command, driven as a user would: the built binary against
//! a real etcd that the tests start (see tests/support).
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, BufReader, Write};

use std::process::{Child, Command, Output, Stdio};

use support::cli::{
    BIN, assert_no_overlap, assert_sections_never_overlap, fairlock, run, spawn_holder, text,
};
use support::signal;

fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// A holder whose command waits for a line on stdin, then exits.
fn hold(
    prefix: &str,
    key: &str,
    extra: &[&str],
) -> (Child, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let (child, first, lines) = spawn_holder(fairlock(prefix).arg("lock").args(extra), key);
    assert!(first.starts_with("HOLDING "), "{first}");
    (child, lines)
}

fn finish(mut holder: Child) -> std::process::ExitStatus {
    writeln!(holder.stdin.as_mut().expect("stdin")).expect("release holder");
    holder.wait().expect("holder exit")
}

async fn wait_queued(prefix: &str, key: &str, n: i64) {
    let mut client = support::shared().client().await;
    let queue = format!("{prefix}{key}/_OWNERS_/");
    support::wait_for_count(&mut client, &queue, n, false).await;
}

async fn wait_clean(prefix: &str) {
    let mut client = support::shared().client().await;
    support::wait_for_count(&mut client, prefix, 0, true).await;
}

/// In etcd's layout (`--layout etcd`, or `FAIRLOCK_LAYOUT=etcd`),
/// `fairlock lock` and `etcdctl lock` commands on one name run their
/// critical sections one at a time: no overlap, no lost update.
#[test]
fn etcd_layout_commands_exclude_etcdctl() {
    let prefix = support::unique_prefix("cli-etcd-layout");
    let name = format!("{prefix}counter");
    assert_sections_never_overlap("--layout etcd and etcdctl", 6, |i| {
        let mut cmd = match i % 3 {
            0 => {
                let mut cmd = fairlock(&prefix);
                cmd.args(["--layout", "etcd", "lock", "counter"]);
                cmd
            }
            1 => {
                let mut cmd = fairlock(&prefix);
                cmd.env("FAIRLOCK_LAYOUT", "etcd").args(["lock", "counter"]);
                cmd
            }
            _ => {
                let mut cmd = Command::new("etcdctl");
                cmd.env("ETCDCTL_API", "3").args([
                    "--endpoints",
                    &support::shared().endpoint,
                    "lock",
                    &name,
                ]);
                cmd
            }
        };
        cmd.stdout(Stdio::null());
        cmd
    });
}

/// Concurrent `fairlock lock` processes run a non-atomic read-sleep-write
/// on a shared file: no overlap, no lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_never_overlap() {
    for (processes, mode) in [(2, "--unfair"), (8, "--fair"), (2, "--fair")] {
        let prefix = support::unique_prefix("cli-mutex");
        assert_no_overlap(processes, mode, || fairlock(&prefix));
        wait_clean(&prefix).await;
    }
}

/// Fair mode runs queued commands in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_keeps_arrival_order() {
    let prefix = support::unique_prefix("cli-order");
    let dir = tempfile::tempdir().expect("tmp");
    let (holder, _) = hold(&prefix, "k", &[]);
    let mut waiters = Vec::new();
    for i in 1..=4 {
        waiters.push(
            fairlock(&prefix)
                .args([
                    "lock",
                    "k",
                    "--",
                    "sh",
                    "-c",
                    &format!("echo {i} >> \"$D/order\""),
                ])
                .env("D", dir.path())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn"),
        );
        wait_queued(&prefix, "k", i).await;
    }
    assert!(finish(holder).success());
    for mut w in waiters {
        assert!(w.wait().expect("wait").success());
    }
    let order = std::fs::read_to_string(dir.path().join("order")).expect("order");
    assert_eq!(order, "1\n2\n3\n4\n");
    wait_clean(&prefix).await;
}

/// `--nonblock` on a held key exits with the conflict code and does not run
/// the command; `--timeout` gives up the same way after waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonblock_and_timeout_do_not_run_the_command() {
    let prefix = support::unique_prefix("cli-conflict");
    let dir = tempfile::tempdir().expect("tmp");
    let marker = dir.path().join("ran");
    let touch = ["sh", "-c", "touch \"$M\""];
    let (holder, _) = hold(&prefix, "k", &[]);
    let out = run(fairlock(&prefix)
        .args(["lock", "-n", "k", "--"])
        .args(touch)
        .env("M", &marker));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("is held by"), "{}", stderr(&out));
    let out = run(fairlock(&prefix)
        .args(["lock", "--nonblock", "--conflict-exit-code", "9", "k", "--"])
        .args(touch)
        .env("M", &marker));
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    let out = run(fairlock(&prefix)
        .args(["lock", "--timeout", "300ms", "k", "--"])
        .args(touch)
        .env("M", &marker));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    assert!(!marker.exists(), "the command ran without the lock");
    assert!(finish(holder).success());
    wait_clean(&prefix).await;
}

/// The command's exit status comes back; a signal death maps to 128+N.
#[test]
fn exit_status_passes_through() {
    let prefix = support::unique_prefix("cli-exit");
    let out = run(fairlock(&prefix).args(["lock", "k", "--", "sh", "-c", "exit 3"]));
    assert_eq!(out.status.code(), Some(3));
    let out = run(fairlock(&prefix).args(["lock", "k", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(out.status.code(), Some(143));
    let out = run(fairlock(&prefix).args(["lock", "k", "--", "/no/such/program"]));
    assert_eq!(out.status.code(), Some(127));
    let out = run(fairlock(&prefix).args([
        "lock",
        "k",
        "--",
        "sh",
        "-c",
        "echo \"$FAIRLOCK_KEY $FAIRLOCK_TOKEN\"",
    ]));
    let said = String::from_utf8_lossy(&out.stdout);
    let (key, token) = said.trim().split_once(' ').expect("key and token");
    assert_eq!(key, "k");
    assert!(token.parse::<u64>().is_ok_and(|t| t > 0), "{said}");
}

/// Commands nest as with `flock`: an inner `lock` (any form) or `elect`
/// runs while the outer one holds its key, and the innermost command
/// finds the outer key taken. `FAIRLOCK_KEY`, which the outer command
/// sets to its key, is never read as the TLS client key (it was: the
/// inner command then exited 2, "a client key was given without its
/// certificate").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_commands_hold_both_keys() {
    let prefix = support::unique_prefix("cli-nest");
    let forms: [&[&str]; 4] = [
        &["lock"],
        &["lock", "--read"],
        &["lock", "--write"],
        &["elect"],
    ];
    for outer in forms {
        for inner in forms {
            // The innermost command: is `a` free? It must not be (exit 7).
            let check = "echo \"$FAIRLOCK_TOKEN\"; exec \"$0\" lock -n -E 7 a -- true";
            let out = run(fairlock(&prefix)
                .args(outer)
                .args(["a", "--", BIN])
                .args(inner)
                .args(["b", "--", "sh", "-c", check, BIN]));
            assert_eq!(
                out.status.code(),
                Some(7),
                "{outer:?} a -- {inner:?} b: {}",
                stderr(&out)
            );
            let token = text(&out.stdout);
            assert!(token.trim().parse::<u64>().is_ok_and(|t| t > 0), "{token}");
        }
    }
    wait_clean(&prefix).await;
}

/// `fairlock lock a b -- CMD` holds both keys while CMD runs (with every
/// key and token in its environment); `status` shows the holder on each
/// key and a multi-key waiter in each key's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_keys_are_held_together() {
    let prefix = support::unique_prefix("cli-multi");
    let check = "printf '%s|%s|' \"$FAIRLOCK_KEYS\" \"$FAIRLOCK_TOKENS\"; \
                 exec \"$0\" lock -n -E 7 b -- true";
    let out = run(fairlock(&prefix).args(["lock", "a", "b", "--", "sh", "-c", check, BIN]));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let said = text(&out.stdout);
    let [keys, tokens, _] = said.split('|').collect::<Vec<_>>()[..] else {
        panic!("{said}")
    };
    assert_eq!(keys, "a\nb");
    assert!(tokens.lines().count() == 2, "{tokens}");
    let (holder, _) = hold(&prefix, "b", &["a"]);
    let waiter = fairlock(&prefix)
        .args(["lock", "b", "a", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_queued(&prefix, "a", 1).await;
    wait_queued(&prefix, "b", 1).await;
    let out = run(fairlock(&prefix).args(["status", "--json"]));
    let locks: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(locks.len(), 2, "{locks:?}");
    // One holder on both: one txn (one token), one lease, one process.
    let holder_of = |i: usize| {
        let h = &locks[i]["holder"];
        (
            h["fencing_token"].clone(),
            h["lease"].clone(),
            h["owner"]["pid"].clone(),
        )
    };
    assert_eq!(holder_of(0), holder_of(1));
    assert!(holder_of(0).0.as_u64().is_some_and(|t| t > 0), "{locks:?}");
    for lock in &locks {
        assert_eq!(lock["waiters"].as_array().map(Vec::len), Some(1), "{lock}");
    }
    assert!(finish(holder).success());
    let mut waiter = waiter;
    assert!(waiter.wait().expect("waiter").success());
    wait_clean(&prefix).await;
}

/// Commands taking the same two keys in opposite orders all run, one at
/// a time (`flock` one by one in the caller's order deadlocks here).
#[test]
fn opposite_orders_never_deadlock() {
    let prefix = support::unique_prefix("cli-opposite");
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("count");
    std::fs::write(&file, "0").expect("write");
    let step = "n=$(cat \"$1\"); sleep 0.05; echo $((n + 1)) > \"$1\"";
    let children: Vec<Child> = (0..6)
        .map(|i| {
            let keys = if i % 2 == 0 { ["x", "y"] } else { ["y", "x"] };
            fairlock(&prefix)
                .arg("lock")
                .args(keys)
                .args(["--", "sh", "-c", step, "sh"])
                .arg(&file)
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    assert_eq!(std::fs::read_to_string(&file).expect("read").trim(), "6");
}

/// A holder killed with SIGKILL frees the lock after its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_its_ttl() {
    let prefix = support::unique_prefix("cli-kill");
    let (mut holder, _) = hold(&prefix, "k", &["--ttl", "2s"]);
    holder.kill().expect("SIGKILL fairlock");
    holder.wait().expect("reap");
    drop(holder.stdin.take()); // the orphaned command ends on EOF
    let out = run(fairlock(&prefix).args(["lock", "k", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    wait_clean(&prefix).await;
}

/// `fairlock --layout etcd status` lists an `etcdctl lock` holder and
/// the waiters behind it, named after their leases, in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_in_etcd_s_layout_lists_etcdctl() {
    let prefix = support::unique_prefix("cli-status-etcd");
    let name = format!("{prefix}jobs");
    let endpoint = support::shared().endpoint.clone();
    let mut holder = support::peers::Peer::etcdctl_lock(&endpoint, &name);
    let held = holder.line().await;
    let mut waiter = support::peers::Peer::etcdctl_lock(&endpoint, &name);
    let dir = format!("{name}/");
    let mut client = support::shared().client().await;
    support::wait_for_count(&mut client, &dir, 2, false).await;
    let keys = client
        .get(
            dir.clone(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("read");
    let waiting = keys
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .find(|k| *k != held)
        .expect("the waiter's key");
    // etcd names a key after its lease in `%x`; status prints every lease
    // in one 16-digit form: compare the numbers.
    let lease_of = |key: &str| i64::from_str_radix(key.rsplit('/').next().expect("hex"), 16);
    let number = |field: &serde_json::Value| i64::from_str_radix(field.as_str().expect("hex"), 16);
    // A third contender, as a Go client would write it, on a lease whose
    // hex has 15 digits: status prints every lease in one 16-digit form.
    let short = (uuid::Uuid::new_v4().as_u64_pair().0 >> 8) as i64;
    let grant = etcd_client::LeaseGrantOptions::new().with_id(short);
    client.lease_grant(60, Some(grant)).await.expect("grant");
    let third = format!("{dir}{short:x}");
    let put = etcd_client::PutOptions::new().with_lease(short);
    client.put(third, "", Some(put)).await.expect("put");
    let out = run(fairlock(&prefix).args(["--layout", "etcd", "status", "jobs", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["key"], "jobs", "{json}");
    assert_eq!(number(&json["holder"]["lease"]), lease_of(&held), "{json}");
    assert_eq!(
        number(&json["waiters"][0]["locker"]),
        lease_of(&waiting),
        "{json}"
    );
    assert_eq!(
        json["waiters"][1]["locker"],
        format!("{short:016x}"),
        "{json}"
    );
    client.lease_revoke(short).await.expect("revoke");
    waiter.terminate();
    holder.terminate();
    support::wait_for_count(&mut client, &dir, 0, true).await;
}

/// `status` shows the holder and the queue in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_holder_and_queue() {
    let prefix = support::unique_prefix("cli-status");
    let out = run(fairlock(&prefix).arg("status"));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no locks"));
    let (holder, _) = hold(&prefix, "jobs/export", &[]);
    let mut waiters = Vec::new();
    for (i, mode) in ["--fair", "--unfair"].into_iter().enumerate() {
        waiters.push(
            fairlock(&prefix)
                .args(["lock", mode, "jobs/export", "--", "true"])
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn"),
        );
        wait_queued(&prefix, "jobs/export", i as i64 + 1).await;
    }
    let out = run(fairlock(&prefix).arg("status"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("jobs/export: held by"), "{text}");
    // The lease in the same format as in --json, and the time it has left.
    let json = run(fairlock(&prefix).args(["status", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let lease = json["holder"]["lease"].as_str().expect("lease");
    assert!(
        text.contains(&format!(", lease {lease}, expires in ")),
        "{text}{json}"
    );
    assert!(text.contains("1. ") && text.contains("(fair)"), "{text}");
    assert!(text.contains("2. ") && text.contains("(unfair)"), "{text}");
    let out = run(fairlock(&prefix).args(["status", "jobs/export", "--json"]));
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        json.starts_with("{\"key\":\"jobs/export\",\"holder\":{"),
        "{json}"
    );
    assert_eq!(json.matches("\"locker\":").count(), 2, "{json}");
    assert!(finish(holder).success());
    for mut w in waiters {
        assert!(w.wait().expect("wait").success());
    }
    wait_clean(&prefix).await;
}

/// SIGINT while waiting leaves the queue (exit 130); a signal while the
/// command runs is passed on to it, and the lock is released after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_leave_the_queue_or_reach_the_command() {
    let prefix = support::unique_prefix("cli-signal");
    let (holder, _) = hold(&prefix, "k", &[]);
    let waiter = fairlock(&prefix)
        .args(["lock", "k", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_queued(&prefix, "k", 1).await;
    signal(waiter.id(), "-INT");
    let out = waiter.wait_with_output().expect("waiter exit");
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    wait_queued_at_most_zero(&prefix).await;
    assert!(finish(holder).success());

    let mut runner = fairlock(&prefix)
        .args(["lock", "k", "--", "sh", "-c"])
        .arg("trap 'echo GOT-TERM; exit 5' TERM; echo STARTED; while :; do sleep 0.05; done")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(runner.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "STARTED");
    signal(runner.id(), "-TERM");
    assert_eq!(lines.next().expect("line").expect("read"), "GOT-TERM");
    assert_eq!(runner.wait().expect("exit").code(), Some(5));
    wait_clean(&prefix).await;
}

async fn wait_queued_at_most_zero(prefix: &str) {
    let mut client = support::shared().client().await;
    let queue = format!("{prefix}k/_OWNERS_/");
    support::wait_for_count(&mut client, &queue, 0, true).await;
}

/// Bad input: usage errors exit 2 with a message and no panic; unreachable
/// endpoints exit 69 naming them.
#[test]
fn bad_input_is_a_clear_error() {
    let prefix = support::unique_prefix("cli-bad");
    for (args, says) in [
        (&["lock", "k"][..], "no command"),
        (&["lock", "", "--", "true"][..], "KEY is empty"),
        (
            &["lock", "--timeout", "soon", "k", "--", "true"][..],
            "not a duration",
        ),
        (&["lock", "--ttl", "1s", "k", "--", "true"][..], "TTL"),
        (&["lock", "a/_OWNERS_/b", "--", "true"][..], "_OWNERS_"),
        (&["bogus"][..], "unknown command"),
    ] {
        let out = run(fairlock(&prefix).args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let port = support::free_port();
    let endpoint = format!("127.0.0.1:{port}");
    let out = run(fairlock(&prefix).args(["--endpoints", &endpoint, "lock", "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(69));
    let err = stderr(&out);
    // The message, then at most one line for the cause and what to do;
    // never the transport's debug dump.
    assert!(err.contains(&endpoint) && err.lines().count() <= 2, "{err}");
    assert!(err.contains("connection refused"), "{err}");
    for dump in ["tonic", "grpc", "Os {"] {
        assert!(!err.contains(dump), "{dump:?} in {err}");
    }
    // What to do names the command's own options, not the library's API
    // alone.
    assert!(err.contains("--connect-timeout"), "{err}");
    let out = run(Command::new(BIN).arg("--help"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("EXAMPLES"));
}

/// `--connect-timeout` and FAIRLOCK_CONNECT_TIMEOUT set how long refused
/// connections are retried, as the error's "within" reports; a value that
/// is not a duration is a usage error naming the option.
#[test]
fn connect_timeout_is_an_option_and_a_variable() {
    let prefix = format!("/test-cli-connect-{}/", std::process::id());
    let endpoint = format!("127.0.0.1:{}", support::free_port());
    let status = |cmd: &mut Command| run(cmd.args(["--endpoints", &endpoint, "status", "k"]));
    let out = status(fairlock(&prefix).args(["--connect-timeout", "1500ms"]));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains("within 1.5s"), "{}", stderr(&out));
    let out = status(fairlock(&prefix).env("FAIRLOCK_CONNECT_TIMEOUT", "1500ms"));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains("within 1.5s"), "{}", stderr(&out));
    let out = status(fairlock(&prefix).args(["--connect-timeout", "soon"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--connect-timeout"),
        "{}",
        stderr(&out)
    );
}

/// Each subcommand has its own help: `lock --help` lists lock's options and
/// the global ones, not those of status or demo.
#[test]
fn each_subcommand_has_its_own_help() {
    let out = run(Command::new(BIN).args(["lock", "--help"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let help = text(&out.stdout);
    for lock_option in [
        "--nonblock",
        "--timeout",
        "--conflict-exit-code",
        "--kill-after",
    ] {
        assert!(help.contains(lock_option), "{lock_option}: {help}");
    }
    for other in ["--processes", "--json", "--svg"] {
        assert!(!help.contains(other), "{other}: {help}");
    }
    assert!(help.contains("--endpoints"), "{help}");
    let out = run(Command::new(BIN).args(["status", "--help"]));
    assert!(text(&out.stdout).contains("--watch"));
    assert!(!text(&out.stdout).contains("--nonblock"));
    let out = run(Command::new(BIN).arg("--version"));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("fairlock {}", env!("CARGO_PKG_VERSION"))
    );
}

/// A mistyped subcommand or option is a usage error with a suggestion.
#[test]
fn typos_get_a_suggestion() {
    let out = run(Command::new(BIN).args(["lcok", "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("'lock'"), "{}", stderr(&out));
    let out = run(Command::new(BIN).args(["lock", "--nonblok", "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--nonblock"), "{}", stderr(&out));
}

/// `completions bash` prints a script that, sourced by bash, registers a
/// completion for `fairlock`.
#[test]
fn bash_completion_registers() {
    let out = run(Command::new(BIN).args(["completions", "bash"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = tempfile::tempdir().expect("tmp");
    let script = dir.path().join("fairlock.bash");
    std::fs::write(&script, &out.stdout).expect("write script");
    let out = run(Command::new("bash")
        .args([
            "--norc",
            "--noprofile",
            "-c",
            "source \"$1\" && complete -p fairlock",
            "bash",
        ])
        .arg(&script));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text(&out.stdout).contains("fairlock"),
        "{}",
        text(&out.stdout)
    );
}

/// `status --json` prints one JSON object per lock, with the documented
/// fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_parses() {
    let prefix = support::unique_prefix("cli-json");
    let (holder, _) = hold(&prefix, "jobs/a", &[]);
    let waiter = fairlock(&prefix)
        .args(["lock", "jobs/a", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_queued(&prefix, "jobs/a", 1).await;
    let out = run(fairlock(&prefix).args(["status", "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let lock = &lines[0];
    assert_eq!(lock["key"], "jobs/a");
    assert!(
        lock["holder"]["fencing_token"]
            .as_u64()
            .is_some_and(|t| t > 0),
        "{lock}"
    );
    // The lease as etcd's own tools print it (16 hex digits), the lock
    // key's lease, with the time it has left.
    let mut client = support::shared().client().await;
    let key = format!("{prefix}jobs/a");
    let kv = client.get(key.as_str(), None).await.expect("get");
    let lease = format!("{:016x}", kv.kvs().first().expect("lock key").lease());
    assert_eq!(lock["holder"]["lease"], lease.as_str(), "{lock}");
    assert!(lock["holder"]["ttl_left_ms"].is_u64(), "{lock}");
    assert!(lock["holder"]["owner"]["pid"].is_u64(), "{lock}");
    assert!(lock["holder"]["owner"]["age_ms"].is_u64(), "{lock}");
    let waiters = lock["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 1, "{lock}");
    assert_eq!(waiters[0]["fair"], true);
    assert!(waiters[0]["locker"].is_string(), "{lock}");
    assert!(finish(holder).success());
    assert!(waiter.wait_with_output().expect("waiter").status.success());
    wait_clean(&prefix).await;
}

/// With RUST_LOG=fairlock=debug the grant is logged on stderr with its key
/// and fencing token; without it, stderr stays quiet.
#[test]
fn rust_log_shows_the_grant() {
    let prefix = support::unique_prefix("cli-log");
    let echo = ["lock", "logged", "--", "sh", "-c", "echo $FAIRLOCK_TOKEN"];
    let out = run(fairlock(&prefix)
        .args(echo)
        .env("RUST_LOG", "fairlock=debug"));
    assert!(out.status.success(), "{}", stderr(&out));
    let token = text(&out.stdout).trim().to_owned();
    let log = stderr(&out);
    let grant = log
        .lines()
        .find(|l| l.contains("granted"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        grant.contains("key=logged") && grant.contains(&format!("token={token}")),
        "{log}"
    );
    let out = run(fairlock(&prefix).args(echo).env_remove("RUST_LOG"));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        stderr(&out)
    );
}

/// `status --watch` redraws until Ctrl-C (exit 0) or until its stdout is
/// closed (exit 0).
#[test]
fn status_watch_ends_on_ctrl_c_and_on_a_closed_stdout() {
    let prefix = support::unique_prefix("cli-watch");
    for how in ["SIGINT", "closed stdout"] {
        let mut watcher = fairlock(&prefix)
            .args(["status", "--watch"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a first view").expect("read");
        assert!(first.contains("fairlock status --watch"), "{first}");
        match how {
            "SIGINT" => signal(watcher.id(), "-INT"),
            _ => drop(lines),
        }
        let out = watcher.wait_with_output().expect("exit");
        assert_eq!(out.status.code(), Some(0), "{how}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{how}: {}", stderr(&out));
    }
}
