//! `fairlock status`: who holds which lock, and who waits, in order.

mod view;
mod watch;

use std::fmt::Write as _;

use fairlock::{BackendConfig, Key, LeaseId, LockKind, LockStatus};

use crate::args::StatusArgs;
use crate::backend::Conn;
use crate::exit::{self, report};
use view::{age, queue};

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
        return watch::run(locker, key, prefix).await;
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
        print!("{}", table(&locks, config.backend()));
    }
    0
}

/// The table of `locks` on `backend` ("etcd", "redis").
fn table(locks: &[LockStatus], backend: &str) -> String {
    let mut out = String::new();
    for lock in locks {
        if lock.kind != LockKind::Mutex {
            shared(&mut out, lock);
            continue;
        }
        match &lock.holder {
            Some(h) => {
                let mut lease = String::new();
                if let Some(id) = h.lease.filter(|&id| id != LeaseId::NONE) {
                    let _ = write!(lease, ", lease {id}");
                }
                if let Some(left) = h.ttl_left {
                    let _ = write!(lease, ", expires in {:.1}s", left.as_secs_f64());
                }
                if let Some(n) = h.nodes.filter(|n| n.total > 1) {
                    let _ = write!(lease, ", on {} of {} nodes", n.holding, n.total);
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
        if let Some(leader) = &lock.leader {
            let _ = writeln!(
                out,
                "  election: led by {} (term {})",
                String::from_utf8_lossy(&leader.value),
                leader.fencing_token
            );
        }
        if lock
            .holder
            .as_ref()
            .is_some_and(|h| h.lease == Some(LeaseId::NONE))
        {
            let _ = writeln!(
                out,
                "  ! the lock key has no lease: fairlock did not write it, and nobody will \
                 release it; if no process of yours wrote it, remove it with etcdctl del"
            );
        }
        for key in &lock.foreign {
            let _ = if backend == "redis" {
                writeln!(
                    out,
                    "  ! {key:?} holds data fairlock did not write: the lock counts as held \
                     by someone else, or fails naming it; if nothing of yours uses it, remove \
                     it with: redis-cli DEL '{key}'"
                )
            } else {
                writeln!(
                    out,
                    "  ! {key:?} is not a fairlock waiter (no lease, or an unknown name): it is \
                     ignored; remove it with: etcdctl del '{key}'"
                )
            };
        }
        queue(&mut out, &lock.waiters);
    }
    out
}

/// A read/write lock or semaphore: every holder, then the line.
fn shared(out: &mut String, lock: &LockStatus) {
    let kind = match lock.kind {
        LockKind::Semaphore { limit } => format!("semaphore of {limit}"),
        _ => "read/write lock".into(),
    };
    let held = match lock.holders.len() {
        0 => "free".to_string(),
        n => format!("{n} holding"),
    };
    let _ = writeln!(out, "{} ({kind}): {held}", lock.key);
    for h in &lock.holders {
        let what = match lock.kind {
            LockKind::Semaphore { limit } => format!("holding {} of {limit}", h.permits),
            _ if h.reads => "reading".into(),
            _ => "holding".into(),
        };
        let mut lease = String::new();
        if let Some(left) = h.ttl_left {
            let _ = write!(lease, ", expires in {:.1}s", left.as_secs_f64());
        }
        let _ = writeln!(
            out,
            "  {what}: {}, fencing token {}{lease}, asked {} ago",
            h.owner.describe(),
            h.fencing_token,
            age(&h.owner),
        );
    }
    for (i, w) in lock.waiters.iter().enumerate() {
        let what = match (lock.kind, w.reads) {
            (LockKind::ReadWrite, true) => "to read".into(),
            (LockKind::ReadWrite, false) => "to write".into(),
            (LockKind::Semaphore { limit }, _) => format!("for {} of {limit}", w.permits),
            _ => "for a permit".to_string(),
        };
        let _ = writeln!(
            out,
            "  {}. waiting {what}: {}, asked {} ago",
            i + 1,
            w.owner.describe(),
            age(&w.owner),
        );
    }
}

/// One line of `status --json`.
fn json(lock: &LockStatus) -> String {
    serde_json::to_string(lock).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fairlock::{LeaseId, LockHolder, LockStatus, LockWaiter, NodeCount, Owner};

    use super::{json, table};

    fn lock(lease: Option<LeaseId>, nodes: Option<NodeCount>) -> LockStatus {
        let owner = Owner::parse("u1 pid=7 host=h\"q at=0");
        let mut lock = LockStatus::new("a\\b\n");
        let mut holder = LockHolder::new(owner.clone(), 12);
        holder.lease = lease;
        holder.ttl_left = Some(Duration::from_millis(2500));
        holder.nodes = nodes;
        lock.holder = Some(holder);
        lock.waiters.push(LockWaiter::new(owner, "L", true));
        lock
    }

    #[test]
    fn text_and_json_show_the_lease_alike() {
        let lease = LeaseId(0x390d_a204_9c11_9906);
        let lock = lock(Some(lease), None);
        let text = table(std::slice::from_ref(&lock), "etcd");
        assert!(
            text.contains(", fencing token 12, lease 390da2049c119906, expires in 2.5s, asked "),
            "{text}"
        );
        assert!(text.contains("    1. h\"q:7 (fair), waiting "), "{text}");
        let line = json(&lock);
        assert!(
            line.starts_with(
                r#"{"key":"a\\b\n","holder":{"owner":{"pid":7,"host":"h\"q","age_ms":"#
            ),
            "{line}"
        );
        assert!(
            line.contains(
                r#","fencing_token":12,"lease":"390da2049c119906","ttl_left_ms":2500,"nodes":null,"reads":false,"permits":1},"#
            ),
            "{line}"
        );
        assert!(
            line.ends_with(
                r#""locker":"L","fair":true,"reads":false,"permits":1}],"foreign":[],"kind":"lock","limit":null,"holders":[],"leader":null}"#
            ),
            "{line}"
        );
    }

    #[test]
    fn text_names_redlock_nodes_and_keys_without_a_lease() {
        let text = table(&[lock(None, Some(NodeCount::new(2, 3)))], "redis");
        assert!(
            text.contains("expires in 2.5s, on 2 of 3 nodes, asked"),
            "{text}"
        );
        let text = table(&[lock(None, Some(NodeCount::new(1, 1)))], "redis");
        assert!(!text.contains("nodes"), "{text}");
        let text = table(&[lock(Some(LeaseId::NONE), None)], "etcd");
        assert!(text.contains("fencing token 12, expires"), "{text}");
        assert!(text.contains("the lock key has no lease"), "{text}");
    }
}
