//! The orchestrator's own etcd requests, retried.

use std::time::Duration;

use crate::BoxError;

/// Runs the orchestrator's own etcd request `op`, retrying failures for a
/// few seconds: after a member restart the client's first requests may
/// meet a closed connection.
pub async fn retrying<T, F, Fut>(what: &str, mut op: F) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 20 => return Err(format!("{what}: {e}").into()),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
