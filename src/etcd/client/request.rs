//! Sending one etcd request: the timeout and error mapping every request
//! shares, a txn's answer, hedged copies, and the pause between retries.

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use etcd_client::TxnResponse;

use super::error::{EtcdError, EtcdResult};

/// A txn's answer: its response, and the revision etcd was at after it. A
/// txn sent as a branch of a batch (`batch.rs`) has no header of its own,
/// so its revision is the batch's.
pub(crate) struct Answer {
    pub resp: TxnResponse,
    pub revision: i64,
}

impl Answer {
    pub fn new(resp: TxnResponse) -> Self {
        let revision = resp.header().map_or(0, |h| h.revision());
        Answer { resp, revision }
    }
}

impl Deref for Answer {
    type Target = TxnResponse;

    fn deref(&self) -> &TxnResponse {
        &self.resp
    }
}

/// Awaits `call` for at most `timeout`; a failure or no answer is an error
/// of `op`. The call is boxed: kept inline, request futures would make
/// every enclosing future, and so every waiting lock, several KiB larger.
pub(crate) async fn request<T>(
    op: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> EtcdResult<T> {
    match tokio::time::timeout(timeout, Box::pin(call)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(source)) => Err(EtcdError::Request { op, source }),
        Err(_) => Err(EtcdError::NoAnswer { op, after: timeout }),
    }
}

/// Sends `call()`, and a second copy when the first has not answered
/// within `after`; the first answer counts, and a transient failure of one
/// copy waits for the other. The client sends each request to a member
/// picked at random, and a connection to a member that was cut off looks
/// alive until its pings go unanswered: a request that went there would
/// hold its caller up for the whole timeout. Only for requests that are
/// safe to send twice: reads, and writes whose compares make a late or
/// second copy fail harmlessly.
pub(crate) async fn hedged<T, F, Fut>(after: Duration, call: F) -> EtcdResult<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = EtcdResult<T>>,
{
    hedge(call(), after, call).await
}

/// [`hedged`] for a first copy already on its way: `second()` goes when
/// `first` has not answered within `after`.
pub(crate) async fn hedge<T, F, S>(
    first: impl Future<Output = EtcdResult<T>>,
    after: Duration,
    second: F,
) -> EtcdResult<T>
where
    F: FnOnce() -> S,
    S: Future<Output = EtcdResult<T>>,
{
    tokio::pin!(first);
    if let Ok(answered) = tokio::time::timeout(after, &mut first).await {
        return answered;
    }
    let second = second();
    tokio::pin!(second);
    tokio::select! {
        r = &mut first => match r {
            Err(e) if e.is_transient() => second.await,
            r => r,
        },
        r = &mut second => match r {
            Err(e) if e.is_transient() => first.await,
            r => r,
        },
    }
}

/// The pauses between retries of a failed request: 50 ms, doubling up to
/// 2 s.
pub(crate) fn retry_backoff() -> crate::util::backoff::Backoff {
    crate::util::backoff::Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::hedged;
    use crate::etcd::client::error::{EtcdError, EtcdResult};

    const AFTER: Duration = Duration::from_millis(100);

    /// Copy `n` (from 0) answers `answers[n]` after `delays[n]`.
    async fn run(delays: &[u64], answers: &[EtcdResult<u32>]) -> (EtcdResult<u32>, usize) {
        let sent = Cell::new(0);
        let result = hedged(AFTER, || {
            let n = sent.get();
            sent.set(n + 1);
            let delay = Duration::from_millis(delays[n]);
            let answer = match &answers[n] {
                Ok(v) => Ok(*v),
                Err(EtcdError::NoAnswer { op, after }) => {
                    Err(EtcdError::NoAnswer { op, after: *after })
                }
                Err(_) => Err(EtcdError::Failed {
                    op: "test",
                    why: "refused".into(),
                }),
            };
            async move {
                tokio::time::sleep(delay).await;
                answer
            }
        })
        .await;
        (result, sent.get())
    }

    fn no_answer() -> EtcdResult<u32> {
        Err(EtcdError::NoAnswer {
            op: "test",
            after: AFTER,
        })
    }

    fn refused() -> EtcdResult<u32> {
        Err(EtcdError::Failed {
            op: "test",
            why: "refused".into(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_answer_sends_one_copy() {
        let (result, sent) = run(&[10, 10], &[Ok(1), Ok(2)]).await;
        assert_eq!((result.ok(), sent), (Some(1), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_first_copy_is_overtaken_by_the_second() {
        let (result, sent) = run(&[5_000, 10], &[Ok(1), Ok(2)]).await;
        assert_eq!((result.ok(), sent), (Some(2), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_of_one_copy_waits_for_the_other() {
        let (result, sent) = run(&[150, 500], &[no_answer(), Ok(2)]).await;
        assert_eq!((result.ok(), sent), (Some(2), 2));
        let (result, sent) = run(&[5_000, 150], &[Ok(1), no_answer()]).await;
        assert_eq!((result.ok(), sent), (Some(1), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_ends_it_at_once() {
        let (result, sent) = run(&[10, 10], &[refused(), Ok(2)]).await;
        assert!(result.is_err());
        assert_eq!(sent, 1);
        let (result, _) = run(&[150, 5_000], &[refused(), Ok(2)]).await;
        assert!(result.is_err(), "a refusal from either copy is the answer");
    }
}
