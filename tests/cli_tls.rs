//! The `fairlock` command on a secured etcd (mutual TLS, a user whose role
//! covers the prefix only): lock and status with --cacert/--cert/--key,
//! --user and FAIRLOCK_PASSWORD; exit 77 for a wrong password or a prefix
//! outside the role, 69 for a TLS failure; no password in any output.
#![cfg(feature = "cli")]

mod support;

use std::process::Command;

use support::cli::{BIN, run, text};
use support::tls::{ETCD_PREFIX, ETCD_USER, certs, secure_etcd};

fn fairlock(prefix: &str, password: &str) -> Command {
    let c = certs();
    let (cert, key) = c.client();
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--endpoints")
        .arg(&secure_etcd().endpoint)
        .arg("--prefix")
        .arg(prefix)
        .arg("--cacert")
        .arg(c.ca())
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .args(["--user", ETCD_USER.0])
        .env("FAIRLOCK_PASSWORD", password);
    cmd
}

fn prefix(test: &str) -> String {
    format!("{ETCD_PREFIX}cli-{test}-{}/", uuid::Uuid::new_v4().simple())
}

#[test]
fn lock_and_status_over_mutual_tls_as_a_restricted_user() {
    let p = prefix("ok");
    let out = run(fairlock(&p, ETCD_USER.1).args([
        "lock",
        "job",
        "--",
        "sh",
        "-c",
        "echo ran $FAIRLOCK_TOKEN",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("ran "),
        "{}",
        text(&out.stdout)
    );
    let out = run(fairlock(&p, ETCD_USER.1).args(["status"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn wrong_password_exits_77_without_showing_it() {
    let out = run(fairlock(&prefix("pw"), "not-the-pw").args(["lock", "job", "--", "true"]));
    let err = text(&out.stderr);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(77), "{err}");
    assert!(
        err.contains("refused to authenticate") && !err.contains("not-the-pw"),
        "{err}"
    );
}

#[test]
fn prefix_outside_the_role_exits_77() {
    let out = run(fairlock("/elsewhere/", ETCD_USER.1).args(["status"]));
    let err = text(&out.stderr);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(77), "{err}");
    assert!(err.contains("denied permission"), "{err}");
}

#[test]
fn untrusted_server_exits_69() {
    let mut cmd = fairlock(&prefix("ca"), ETCD_USER.1);
    cmd.arg("--cacert").arg(certs().other_ca());
    let out = run(cmd.args(["status"]));
    let err = text(&out.stderr);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("not signed by a CA"), "{err}");
}

#[test]
fn cert_without_key_is_a_usage_error() {
    let (cert, _) = certs().client();
    let out = run(Command::new(BIN)
        .env_clear()
        .arg("--endpoints")
        .arg(&secure_etcd().endpoint)
        .arg("--cert")
        .arg(cert)
        .arg("status"));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("without its key"), "{err}");
}
