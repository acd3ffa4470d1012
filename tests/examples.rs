//! The library examples (examples/basic.rs, fenced.rs, ordering.rs,
//! election.rs), run as a user would run them, against a real etcd that
//! the tests start (see tests/support).
#![cfg(feature = "etcd")]

mod support;

use std::process::{Command, Output};

/// The features this test was built with, so that `cargo run` builds the
/// example with the library this test already built (and `cargo test`
/// builds the examples too, so that is usually no work at all).
fn features() -> String {
    [
        ("etcd", cfg!(feature = "etcd")),
        ("redis", cfg!(feature = "redis")),
        ("serde", cfg!(feature = "serde")),
        ("metrics", cfg!(feature = "metrics")),
        ("cli", cfg!(feature = "cli")),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| *name)
    .collect::<Vec<_>>()
    .join(",")
}

/// `cargo run --example NAME -- ARGS` with `FAIRLOCK_ENDPOINTS` set to
/// `endpoints` and a prefix of its own.
fn example(name: &str, args: &[&str], endpoints: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--example", name, "--no-default-features"])
        .args(["--features", &features()]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    // What cargo sets for this test run describes this package to it; some
    // build scripts of the dependencies count it as input, and would be
    // rebuilt (and with them the library) for the example and again for the
    // next test build.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || name == "CARGO_TARGET_TMPDIR"
        {
            cmd.env_remove(&*name);
        }
    }
    let out = cmd
        .arg("--")
        .args(args)
        .env("FAIRLOCK_ENDPOINTS", endpoints)
        .env("FAIRLOCK_PREFIX", support::unique_prefix(name))
        .env_remove("FAIRLOCK_TTL")
        .output()
        .expect("run cargo");
    println!(
        "--- {name} stdout\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    println!(
        "--- {name} stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn basic_takes_and_releases_the_lock() {
    let out = example("basic", &[], &support::shared().endpoint);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("exporting with fencing token "), "{text}");
    assert!(text.ends_with("released\n"), "{text}");
}

#[test]
fn basic_says_when_no_etcd_answers() {
    let port = support::free_port().to_string();
    let out = example("basic", &[], &format!("127.0.0.1:{port}"));
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("No etcd answered at ") && err.contains(&port),
        "{err}"
    );
}

#[test]
fn fenced_refuses_the_stale_holders_write() {
    let out = example("fenced", &[], &support::shared().endpoint);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("A: refused, nothing written"), "{text}");
    assert!(
        text.contains("the report says: \"written by B with fencing token"),
        "{text}"
    );
}

#[test]
fn ordering_grants_in_arrival_order() {
    let out = example("ordering", &["4"], &support::shared().endpoint);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("fair mode granted all 4 requests in arrival order"),
        "{text}"
    );
}

#[test]
fn election_elects_each_node_in_turn() {
    let out = example("election", &[], &support::shared().endpoint);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    for node in ["node-1", "node-2", "node-3"] {
        assert!(text.contains(&format!("{node}: resigned")), "{text}");
        assert!(
            text.contains(&format!("follower: {node} leads (term ")),
            "{text}"
        );
    }
}
