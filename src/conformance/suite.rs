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
/// `conformance_suite` with one `#[test]` per check and mode (20 tests).
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
            use $crate::conformance as suite;

            #[test]
            fn mutual_exclusion_fair() {
                suite::run(async {
                    suite::mutual_exclusion(&$make("mx-fair").await, &[true, true, true]).await
                });
            }
            #[test]
            fn mutual_exclusion_unfair() {
                suite::run(async {
                    suite::mutual_exclusion(&$make("mx-unfair").await, &[false, false, false]).await
                });
            }
            #[test]
            fn mutual_exclusion_mixed_fair_and_unfair() {
                suite::run(async {
                    suite::mutual_exclusion(&$make("mx-mixed").await, &[true, false, true, false])
                        .await
                });
            }
            #[test]
            fn fair_order_in_arrival() {
                suite::run(async { suite::fair_order(&$make("order").await).await });
            }
            #[test]
            fn try_lock_semantics() {
                suite::run(async { suite::try_lock(&$make("try").await).await });
            }
            #[test]
            fn timeout_leaves_nothing_fair() {
                suite::run(async {
                    suite::timeout_leaves_nothing(&$make("timeout-fair").await, true).await
                });
            }
            #[test]
            fn timeout_leaves_nothing_unfair() {
                suite::run(async {
                    suite::timeout_leaves_nothing(&$make("timeout-unfair").await, false).await
                });
            }
            #[test]
            fn cancel_leaves_nothing_fair() {
                suite::run(async {
                    suite::cancel_leaves_nothing(&$make("cancel-fair").await, true).await
                });
            }
            #[test]
            fn cancel_leaves_nothing_unfair() {
                suite::run(async {
                    suite::cancel_leaves_nothing(&$make("cancel-unfair").await, false).await
                });
            }
            #[test]
            fn drop_future_leaves_nothing_fair() {
                suite::run(async {
                    suite::drop_future_leaves_nothing(&$make("dropf-fair").await, true).await
                });
            }
            #[test]
            fn drop_future_leaves_nothing_unfair() {
                suite::run(async {
                    suite::drop_future_leaves_nothing(&$make("dropf-unfair").await, false).await
                });
            }
            #[test]
            fn drop_guard_releases_fair() {
                suite::run(async {
                    suite::drop_guard_releases(&$make("dropg-fair").await, true).await
                });
            }
            #[test]
            fn drop_guard_releases_unfair() {
                suite::run(async {
                    suite::drop_guard_releases(&$make("dropg-unfair").await, false).await
                });
            }
            #[test]
            fn key_isolation_fair() {
                suite::run(async { suite::key_isolation(&$make("iso-fair").await, true).await });
            }
            #[test]
            fn key_isolation_unfair() {
                suite::run(async { suite::key_isolation(&$make("iso-unfair").await, false).await });
            }
            #[test]
            fn bad_input_is_a_clear_error() {
                suite::run(async { suite::bad_input(&$make("bad").await).await });
            }
            #[test]
            fn read_write_lock() {
                suite::run(async { suite::read_write_lock(&$make("rw").await).await });
            }
            #[test]
            fn semaphore() {
                suite::run(async { suite::semaphore(&$make("sem").await).await });
            }
            #[test]
            fn shared_giving_up_leaves_nothing() {
                suite::run(async {
                    suite::shared_giving_up_leaves_nothing(&$make("shared-give-up").await).await
                });
            }
            #[test]
            fn lock_is_the_write_lock_of_a_read_key() {
                suite::run(async {
                    suite::lock_is_the_write_lock_of_a_read_key(&$make("mixed").await).await
                });
            }
            #[test]
            fn read_lock_waits_for_the_mutex() {
                suite::run(async {
                    suite::read_lock_waits_for_the_mutex(&$make("after-mutex").await).await
                });
            }
            #[test]
            fn shared_bad_input_is_a_clear_error() {
                suite::run(async { suite::shared_bad_input(&$make("shared-bad").await).await });
            }
        }
    };
}
