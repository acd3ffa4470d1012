//! `fairlock demo`, run as a user would: the built binary against a real
//! etcd that the tests start (see tests/support).
#![cfg(feature = "cli")]

mod support;

use std::process::{Command, Output};

use support::cli::{BIN, fairlock, run, text};

/// Runs the demo with `args` under a fresh prefix; asserts that it
/// succeeded and left no key behind; returns its output.
async fn demo(args: &[&str]) -> String {
    let prefix = support::unique_prefix("cli-demo");
    let out: Output = run(fairlock(&prefix).arg("demo").args(args));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let mut client = support::shared().client().await;
    assert_eq!(
        support::count_keys(&mut client, &prefix).await,
        0,
        "keys left under {prefix}"
    );
    stdout
}

/// The line of `text` starting with `start`.
fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{text}"))
}

/// Every request arriving at once with short holds: fair mode is judged by
/// the order etcd saw the requests arrive, so it reports strict arrival
/// order whatever the timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_keeps_arrival_order_with_no_interval() {
    let out = demo(&["--interval-ms", "0", "--hold-ms", "5", "--mode", "fair"]).await;
    assert!(
        out.contains("verdict: fair mode granted all 24 requests in strict arrival order"),
        "{out}"
    );
    assert!(!out.contains("FAIL") && !out.contains("unfair"), "{out}");
}

/// The default run: both verdicts, and the summary's three figures for
/// each mode. How many unfair grants come out of order depends on races
/// between a releasing process asking again and the waiter it woke, so
/// the count is checked for its form, not its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_run_reports_both_modes_side_by_side() {
    let out = demo(&[]).await;
    assert!(
        out.contains("verdict: fair mode granted all 24 requests in strict arrival order"),
        "{out}"
    );
    let unfair = line(&out, "verdict: unfair mode granted ");
    let k: usize = unfair
        .trim_start_matches("verdict: unfair mode granted ")
        .strip_suffix(" of 24 requests out of arrival order")
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("{unfair}"));
    let summary = out.split("\n== summary ==\n").nth(1).expect("a summary");
    let columns = |start: &str| -> Vec<String> {
        line(summary, start)[start.len()..]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(columns(" "), ["fair", "unfair"], "{out}");
    assert_eq!(
        columns("out of order"),
        ["0 of 24".to_owned(), format!("{k} of 24")],
        "{out}"
    );
    for figure in ["longest wait", "mean wait"] {
        let values = columns(figure);
        assert_eq!(values.len(), 2, "{out}");
        assert!(values.iter().all(|v| v.ends_with(" ms")), "{out}");
    }
}

/// `--svg` draws each request's arrival, wait and hold, with a legend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svg_marks_arrivals_waits_and_holds() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("t.svg");
    let out = demo(&[
        "--processes",
        "2",
        "--tasks",
        "3",
        "--svg",
        path.to_str().expect("utf-8 path"),
    ])
    .await;
    assert!(
        out.contains("fair mode granted all 6 requests in strict arrival order"),
        "{out}"
    );
    let picture = std::fs::read_to_string(&path).expect("svg written");
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    assert!(picture.contains("fair mode") && picture.contains("unfair mode"));
    // A row per request of both runs: its arrival mark, wait and hold.
    for mark in ["arrival", "wait", "hold"] {
        let n = picture.matches(&format!("class=\"{mark}\"")).count();
        assert_eq!(n, 12, "{mark} marks");
    }
    // Each arrival mark is where its wait starts, and its hold begins
    // where the wait ends.
    for row in picture.split("<g><title>").skip(1) {
        let attr = |class: &str, name: &str| -> u64 {
            let element = row
                .split('<')
                .find(|e| e.contains(&format!("class=\"{class}\"")))
                .unwrap_or_else(|| panic!("no {class} in {row}"));
            let start = element
                .find(&format!(" {name}=\""))
                .unwrap_or_else(|| panic!("no {name} in {element}"))
                + name.len()
                + 3;
            element[start..]
                .split('"')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {element}"))
        };
        assert_eq!(attr("arrival", "x1"), attr("wait", "x1"), "{row}");
        assert_eq!(attr("wait", "x2"), attr("hold", "x"), "{row}");
    }
    let legend = picture
        .split("<g class=\"legend\">")
        .nth(1)
        .expect("a legend");
    for entry in [
        "asked (arrival)",
        "waiting",
        "holding the lock",
        "process 0",
        "process 1",
    ] {
        assert!(legend.contains(entry), "legend lacks {entry:?}");
    }
}

/// The demo judges order by etcd's revisions: on Redis it says so and
/// exits with the usage code, without connecting.
#[test]
fn demo_on_redis_is_refused() {
    let out = run(Command::new(BIN)
        .args(["--endpoints", "redis://127.0.0.1:1", "demo"])
        .env_remove("FAIRLOCK_ENDPOINTS"));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("runs on etcd only") && err.lines().count() == 1,
        "{err}"
    );
}
