//! [`patient`]: the context of a `lock` that must succeed.

use std::time::Duration;

use crate::Context;

/// A context whose deadline only guards against a hang: two minutes, never
/// reached when the backend is correct. The checks pass it to every `lock`
/// that must succeed.
///
/// # Examples
/// ```
/// # async fn example(locker: &dyn fairlock::Locker) -> fairlock::Result<()> {
/// let guard = locker.lock(&fairlock::conformance::patient(), &"k".into()).await?;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub fn patient() -> Context {
    Context::background().with_timeout(Duration::from_secs(120))
}
