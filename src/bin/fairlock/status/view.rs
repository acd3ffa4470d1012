//! Text that `fairlock status` and `status --watch` both show: how long
//! ago someone asked, and a lock's queue, one numbered line a waiter.

use std::fmt::Write as _;

use fairlock::{LockWaiter, Owner};

/// How long ago `owner` asked (by this machine's clock), or `?`.
pub fn age(owner: &Owner) -> String {
    owner
        .age()
        .map_or("?".into(), |d| format!("{:.1}s", d.as_secs_f64()))
}

/// `  1. host:pid (fair), waiting 2.5s`, a line each, in queue order.
pub fn queue(out: &mut String, waiters: &[LockWaiter]) {
    for (n, w) in waiters.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_waiters_in_order_with_their_mode() {
        let waiters = [
            LockWaiter::new(Owner::parse("u1 pid=7 host=h at=0"), "L1", true),
            LockWaiter::new(Owner::parse("plain"), "L2", false),
        ];
        let mut out = String::new();
        queue(&mut out, &waiters);
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].starts_with("    1. h:7 (fair), waiting "), "{out}");
        assert_eq!(lines[1], "    2. plain (unfair), waiting ?");
    }
}
