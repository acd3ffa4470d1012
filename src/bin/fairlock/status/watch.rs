//! `fairlock status --watch`: the status view redrawn every second until
//! Ctrl-C (or until stdout is closed), for a person watching a busy lock.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use fairlock::{Key, LockStatus};

use super::view::{age, queue};
use crate::backend::Conn;
use crate::exit::{self, report};

/// Clears the terminal and moves the cursor home.
const CLEAR: &str = "\x1b[2J\x1b[H";

/// Redraws until Ctrl-C (exit 0), a closed stdout (exit 0), or a failure
/// to read the status (reported, with its exit code).
pub async fn run(conn: Conn, key: Option<Key>, prefix: String) -> u8 {
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let code = loop {
        tokio::select! {
            _ = &mut ctrl_c => break 0,
            _ = tick.tick() => {}
        }
        let locks = match conn.status(key.as_ref()).await {
            Ok(locks) => locks,
            Err(e) => {
                report(&e);
                break exit::of(&e);
            }
        };
        let view = seen.render(&locks, key.as_ref(), &prefix);
        let mut out = std::io::stdout().lock();
        if out
            .write_all(format!("{CLEAR}{view}").as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            break 0; // stdout closed: nobody is watching
        }
    };
    let _ = conn.close().await;
    code
}

/// When each grant (key and fencing token) was first seen, for "held for".
#[derive(Default)]
struct Seen {
    since: HashMap<(String, u64), Instant>,
}

impl Seen {
    fn render(&mut self, locks: &[LockStatus], key: Option<&Key>, prefix: &str) -> String {
        let now = Instant::now();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "fairlock status --watch: {} under {prefix} (Ctrl-C to quit)\n",
            key.map_or("every lock".to_owned(), |k| format!("lock {k}"))
        );
        if locks.is_empty() {
            let _ = writeln!(out, "nobody holds or waits for any lock");
        }
        let mut current = HashMap::new();
        for lock in locks {
            match &lock.holder {
                Some(h) => {
                    let grant = (lock.key.clone(), h.fencing_token);
                    let since = *self.since.get(&grant).unwrap_or(&now);
                    current.insert(grant, since);
                    let _ = writeln!(
                        out,
                        "{}  held by {}  token {}  held for {}{}  asked {} ago",
                        lock.key,
                        h.owner.describe(),
                        h.fencing_token,
                        if since == now { "<" } else { "" },
                        secs(now.duration_since(since).max(Duration::from_secs(1))),
                        age(&h.owner),
                    );
                }
                None => {
                    let _ = writeln!(out, "{}  free", lock.key);
                }
            }
            queue(&mut out, &lock.waiters);
        }
        // Forget grants that ended, so the map stays as small as the view.
        self.since = current;
        out
    }
}

fn secs(d: Duration) -> String {
    format!("{:.0}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairlock::{LockHolder, LockWaiter, Owner};

    fn view(token: u64) -> Vec<LockStatus> {
        let owner = Owner::parse("u1 pid=7 host=h at=0");
        let mut lock = LockStatus::new("jobs");
        lock.holder = Some(LockHolder::new(owner.clone(), token));
        lock.waiters.push(LockWaiter::new(owner, "L", false));
        vec![lock]
    }

    #[test]
    fn shows_holder_token_and_queue_and_forgets_old_grants() {
        let mut seen = Seen::default();
        let text = seen.render(&view(5), None, "/p/");
        assert!(
            text.contains("jobs  held by h:7  token 5  held for <1s"),
            "{text}"
        );
        assert!(text.contains("  1. h:7 (unfair), waiting"), "{text}");
        seen.render(&view(6), None, "/p/");
        assert_eq!(seen.since.len(), 1, "only the current grant is kept");
        assert!(seen.since.contains_key(&("jobs".to_owned(), 6)));
    }
}
