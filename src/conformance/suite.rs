//! [`run`] and the [`conformance_tests!`](crate::conformance_tests) macro:
//! every check as a `#[test]` of its own.

use std::future::Future;

/// Runs one check to its end on a new multi-thread tokio runtime with two
/// workers (the checks spawn tasks that must run in parallel with the
/// check), as every test of [`conformance_tests!`](crate::conformance_tests)
/// does.
///
/// # Panics
/// When the runtime cannot be built, or the check panics.
///
/// # Examples
/// ```
/// let answer = fairlock::conformance::run(async { 6 * 7 });
/// assert_eq!(answer, 42);
/// ```
pub fn run<F: Future>(check: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance check")
        .block_on(check)
}

/// Declares the whole conformance suite as tests: a module
/// `conformance_suite` with one `#[test]` per check and mode (34 tests).
///
/// The argument is the path of an `async fn(&str) -> B` where `B` implements
/// [`conformance::Backend`](crate::conformance::Backend): each test calls
/// it once, with a name of its own (`"mx-fair"`, `"try"`, ...) to build a
/// fresh backend from (a key prefix, say). The generated module imports its
/// parent's items (`use super::*`), so a function defined beside the macro
/// call is found by its bare name.
///
/// See [`conformance`](crate::conformance) for a whole example.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        mod conformance_suite {
            #[allow(unused_imports)]
            use super::*;
            $crate::__conformance_module!($make, {
                mutual_exclusion_fair: mutual_exclusion("mx-fair", &[true, true, true]),
                mutual_exclusion_unfair: mutual_exclusion("mx-unfair", &[false, false, false]),
                mutual_exclusion_mixed_fair_and_unfair:
                    mutual_exclusion("mx-mixed", &[true, false, true, false]),
                fair_order_in_arrival: fair_order("order"),
                try_lock_semantics: try_lock("try"),
                timeout_leaves_nothing_fair: timeout_leaves_nothing("timeout-fair", true),
                timeout_leaves_nothing_unfair: timeout_leaves_nothing("timeout-unfair", false),
                cancel_leaves_nothing_fair: cancel_leaves_nothing("cancel-fair", true),
                cancel_leaves_nothing_unfair: cancel_leaves_nothing("cancel-unfair", false),
                drop_future_leaves_nothing_fair: drop_future_leaves_nothing("dropf-fair", true),
                drop_future_leaves_nothing_unfair:
                    drop_future_leaves_nothing("dropf-unfair", false),
                drop_guard_releases_fair: drop_guard_releases("dropg-fair", true),
                drop_guard_releases_unfair: drop_guard_releases("dropg-unfair", false),
                key_isolation_fair: key_isolation("iso-fair", true),
                key_isolation_unfair: key_isolation("iso-unfair", false),
                a_burst_of_waiters_is_served_fair:
                    a_burst_of_waiters_is_served("burst-fair", true, suite::BURST),
                a_burst_of_waiters_is_served_unfair:
                    a_burst_of_waiters_is_served("burst-unfair", false, suite::BURST),
                bad_input_is_a_clear_error: bad_input("bad"),
                read_write_lock: read_write_lock("rw"),
                semaphore: semaphore("sem"),
                shared_giving_up_leaves_nothing: shared_giving_up_leaves_nothing("shared-give-up"),
                lock_is_the_write_lock_of_a_read_key: lock_is_the_write_lock_of_a_read_key("mixed"),
                read_lock_waits_for_the_mutex: read_lock_waits_for_the_mutex("after-mutex"),
                shared_bad_input_is_a_clear_error: shared_bad_input("shared-bad"),
                lock_all_is_all_or_nothing_fair: lock_all_is_all_or_nothing("all-fair", true),
                lock_all_is_all_or_nothing_unfair:
                    lock_all_is_all_or_nothing("all-unfair", false),
                lock_all_opposite_orders_fair: lock_all_opposite_orders("all-opp-fair", true),
                lock_all_opposite_orders_unfair: lock_all_opposite_orders("all-opp-unfair", false),
                lock_all_overlapping_sets_fair: lock_all_overlapping_sets("all-sets-fair", true),
                lock_all_overlapping_sets_unfair:
                    lock_all_overlapping_sets("all-sets-unfair", false),
                lock_all_keeps_arrival_order: lock_all_keeps_arrival_order("all-order"),
                lock_all_giving_up_leaves_nothing_fair:
                    lock_all_giving_up_leaves_nothing("all-give-up-fair", true),
                lock_all_giving_up_leaves_nothing_unfair:
                    lock_all_giving_up_leaves_nothing("all-give-up-unfair", false),
                lock_all_bad_input: lock_all_bad_input("all-bad"),
            });
        }
    };
}

/// Declares the election checks as tests: a module
/// `election_conformance_suite` with one `#[test]` per check (8 tests),
/// each calling `$make(name)` for a fresh
/// [`ElectionBackend`](crate::conformance::ElectionBackend), as
/// [`conformance_tests!`](crate::conformance_tests) does for lockers.
#[macro_export]
macro_rules! election_conformance_tests {
    ($make:path) => {
        mod election_conformance_suite {
            #[allow(unused_imports)]
            use super::*;
            $crate::__conformance_module!($make, {
                election_order: election_order("el-order"),
                one_leader_at_a_time: one_leader_at_a_time("el-one"),
                resign_hands_over: resign_hands_over("el-resign"),
                proclaim_changes_the_value: proclaim_changes_the_value("el-proclaim"),
                observers_see_every_change: observers_see_every_change("el-observe"),
                giving_up_a_campaign_leaves_nothing:
                    giving_up_a_campaign_leaves_nothing("el-give-up"),
                dropping_a_leadership_hands_over: dropping_a_leadership_hands_over("el-drop"),
                election_bad_input: election_bad_input("el-bad"),
            });
        }
    };
}

/// The table behind both macros: per row `test: check("name", args...)`,
/// a `#[test] fn test` that [`run`]s `check(&$make("name").await, args...)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_module {
    ($make:path, { $($test:ident: $check:ident($name:literal $(, $arg:expr)*)),* $(,)? }) => {
        use $crate::conformance as suite;
        $(
            #[test]
            fn $test() {
                suite::run(async { suite::$check(&$make($name).await $(, $arg)*).await });
            }
        )*
    };
}
