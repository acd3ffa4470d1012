//! `fairlock status`: who holds which lock, and who waits, in order.

use std::fmt::Write as _;

use fairlock::{BackendConfig, Key};

use crate::args::StatusArgs;
use crate::backend::{Conn, LockView as LockStatus};
use crate::{exit, report};
use fairlock::Owner;

pub async fn run(config: BackendConfig, a: StatusArgs) -> u8 {
    let key = a.key.as_deref().map(Key::from);
    if let Some(Err(e)) = key.as_ref().map(Key::validate) {
        report(&e);
        return exit::USAGE;
    }
    let prefix = config.prefix().to_owned();
    // Unfair: a Redlock configuration refuses fair lockers.
    let locker = match Conn::connect(&config, false).await {
        Ok(l) => l,
        Err(e) => {
            report(&e);
            return exit::of(&e);
        }
    };
    if a.watch {
        return crate::watch::run(locker, key, prefix).await;
    }
    let locks = match locker.status(key.as_ref()).await {
        Ok(locks) => locks,
        Err(e) => {
            report(&e);
            return exit::of(&e);
        }
    };
    let _ = locker.close().await;
    if a.json {
        for lock in &locks {
            println!("{}", json(lock));
        }
    } else if locks.is_empty() {
        match &key {
            Some(key) => println!("lock {key} is free (nobody holds or waits for it)"),
            None => println!("no locks are held or waited for under {prefix}"),
        }
    } else {
        print!("{}", table(&locks));
    }
    0
}

fn age(owner: &Owner) -> String {
    owner
        .age()
        .map_or("?".into(), |d| format!("{:.1}s", d.as_secs_f64()))
}

fn table(locks: &[LockStatus]) -> String {
    let mut out = String::new();
    for lock in locks {
        match &lock.holder {
            Some(h) => {
                let mut lease = String::new();
                if let Some(id) = h.lease {
                    let _ = write!(lease, ", lease {id:x}");
                }
                if let Some(left) = h.ttl_left {
                    let _ = write!(lease, ", expires in {:.1}s", left.as_secs_f64());
                }
                if let Some((held, total)) = h.nodes {
                    let _ = write!(lease, ", on {held} of {total} nodes");
                }
                let _ = writeln!(
                    out,
                    "{}: held by {}, fencing token {}{lease}, asked {} ago",
                    lock.key,
                    h.owner.describe(),
                    h.fencing_token,
                    age(&h.owner),
                );
            }
            None => {
                let _ = writeln!(out, "{}: free", lock.key);
            }
        }
        if lock.holder.as_ref().is_some_and(|h| h.lease == Some(0)) {
            let _ = writeln!(
                out,
                "  ! the lock key has no lease: fairlock did not write it, and nobody will \
                 release it; if no process of yours wrote it, remove it with etcdctl del"
            );
        }
        for key in &lock.foreign {
            let _ = writeln!(
                out,
                "  ! {key:?} is not a fairlock waiter (no lease, or an unknown name): it is \
                 ignored; remove it with: etcdctl del '{key}'"
            );
        }
        for (n, w) in lock.waiters.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:>3}. {} ({}), waiting {}",
                n + 1,
                w.owner.describe(),
                if w.fair { "fair" } else { "unfair" },
                age(&w.owner),
            );
        }
    }
    out
}

/// One line of `status --json`.
fn json(lock: &LockStatus) -> String {
    serde_json::to_string(lock).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{LockStatus, json};
    use crate::backend::{HolderView, WaiterView};
    use fairlock::Owner;

    #[test]
    fn json_keeps_its_field_names_and_quotes_strings() {
        let owner = Owner::parse("u1 pid=7 host=h\"q at=0");
        let lock = LockStatus {
            key: "a\\b\n".into(),
            holder: Some(HolderView {
                owner: owner.clone(),
                fencing_token: 12,
                lease: Some(34),
                ttl_left: None,
                nodes: Some((2, 3)),
            }),
            waiters: vec![WaiterView {
                owner,
                locker: "L".into(),
                fair: true,
            }],
            foreign: vec!["x".into()],
        };
        let line = json(&lock);
        assert!(
            line.starts_with(
                r#"{"key":"a\\b\n","holder":{"owner":{"pid":7,"host":"h\"q","age_ms":"#
            ),
            "{line}"
        );
        assert!(
            line.contains(
                r#","fencing_token":12,"lease":34,"ttl_left_ms":null},"waiters":[{"owner":{"#
            ),
            "{line}"
        );
        assert!(line.ends_with(r#""locker":"L","fair":true}]}"#), "{line}");
    }
}
