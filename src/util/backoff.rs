//! Pauses between retries of a failed request: the one backoff of the crate.

use std::time::Duration;

/// Doubling pauses with an upper bound, optionally with random jitter.
///
/// `next()` returns the pause to wait now and doubles the one after it, up to
/// `max`; `reset()` starts again from `first` after a success.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    #[cfg_attr(not(any(feature = "etcd", feature = "redis")), allow(dead_code))]
    first: Duration,
    max: Duration,
    current: Duration,
    jitter: bool,
}

impl Backoff {
    /// Pauses of `first`, `2 * first`, ... up to `max`.
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        let first = first.min(max);
        Self {
            first,
            max,
            current: first,
            jitter: false,
        }
    }

    /// The same pauses, each lengthened by a random part of itself, so
    /// clients that failed together do not retry together.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn with_jitter(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// The pause to wait now; the next one is twice as long, up to `max`.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.current;
        self.current = (self.current * 2).min(self.max);
        if self.jitter {
            pause + jitter(pause)
        } else {
            pause
        }
    }

    /// Waits [`Backoff::next_pause`].
    #[cfg_attr(
        not(any(feature = "etcd", feature = "redis")),
        allow(dead_code, reason = "the memory backend never waits on a server")
    )]
    pub(crate) async fn sleep(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// Starts again from the first pause (after a success).
    #[cfg_attr(not(any(feature = "etcd", feature = "redis")), allow(dead_code))]
    pub(crate) fn reset(&mut self) {
        self.current = self.first;
    }
}

/// A random duration below `max`.
pub(crate) fn jitter(max: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(random % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_max_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(50), ms(300));
        let pauses: Vec<_> = (0..5).map(|_| b.next_pause()).collect();
        assert_eq!(pauses, [ms(50), ms(100), ms(200), ms(300), ms(300)]);
        b.reset();
        assert_eq!(b.next_pause(), ms(50));
    }

    #[test]
    fn jitter_stays_below_twice_the_pause() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(10)).with_jitter();
        for _ in 0..100 {
            let p = b.next_pause();
            assert!(p >= ms(10) && p < ms(20), "{p:?}");
        }
    }
}
