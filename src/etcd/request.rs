//! Sending one etcd request: the timeout and error mapping every request
//! shares, and small readers and builders of txn parts.

use std::future::Future;
use std::time::Duration;

use etcd_client::{GetResponse, PutOptions, TxnOp, TxnOpResponse, TxnResponse};

use super::error::{EtcdError, EtcdResult};

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

/// Header revision of a response.
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

/// The `i`-th op response of a txn, if it was a range.
pub(crate) fn range_at(resp: &TxnResponse, i: usize) -> Option<GetResponse> {
    match resp.op_responses().into_iter().nth(i)? {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    }
}

/// `put key value` bound to `lease`.
pub(crate) fn put_leased(key: &[u8], value: &[u8], lease: i64) -> TxnOp {
    TxnOp::put(
        key.to_vec(),
        value.to_vec(),
        Some(PutOptions::new().with_lease(lease)),
    )
}

/// Marks a waiter's queue key modified (its value and lease unchanged): the
/// grant or wake signal its locker watches for.
pub(crate) fn touch(queue_key: &[u8]) -> TxnOp {
    TxnOp::put(
        queue_key.to_vec(),
        Vec::new(),
        Some(PutOptions::new().with_ignore_value().with_ignore_lease()),
    )
}

/// The pauses between retries of a failed request: 50 ms, doubling up to
/// 2 s.
pub(crate) fn retry_backoff() -> crate::backoff::Backoff {
    crate::backoff::Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
}
