//! What a failed connect says: wrong TLS settings, refused credentials,
//! nothing listening, or too few nodes answering.

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::failed_op::FailedOp;
use crate::redis::connect::node_error::NodeError;
use crate::redis::connect::secure::tls_failure;
use crate::{BoxError, Error, Result};

/// The error for nodes that could not be reached.
pub(crate) fn unreachable(config: &RedisConfig, endpoints: String, source: BoxError) -> Error {
    Error::Connect {
        backend: "redis",
        endpoints,
        timeout: config.connect_timeout(),
        source,
    }
}

/// The error of a connect to one node (a cluster, sentinels) that failed.
pub(crate) fn failed(config: &RedisConfig, error: NodeError) -> Error {
    let name = error.node.clone();
    match check(config, 1, 1, vec![error]) {
        Err(e) => e,
        Ok(()) => unreachable(config, name, "no answer".into()),
    }
}

/// Checks the `PING`s of a connect to `total` nodes of which `quorum` must
/// answer: `errors` holds the nodes that failed. Wrong TLS settings or
/// credentials fail the same way on every retry, so they are reported even
/// when a quorum answered.
pub(crate) fn check(
    config: &RedisConfig,
    total: usize,
    quorum: usize,
    mut errors: Vec<NodeError>,
) -> Result<()> {
    if let Some(at) = errors.iter().position(|e| tls_failure(config, e).is_some()) {
        let node = errors.swap_remove(at);
        return Err(Error::Tls {
            backend: "redis",
            endpoints: node.node.clone(),
            reason: tls_failure(config, &node).unwrap_or_default(),
            source: Box::new(node),
        });
    }
    let mut failed = FailedOp {
        op: "connect",
        total,
        quorum,
        errors,
    };
    if let Some(refusal) = failed.refusal() {
        return Err(refusal);
    }
    let errors = failed.errors;
    if total - errors.len() >= quorum {
        return Ok(());
    }
    let endpoints = errors
        .iter()
        .map(|e| e.node.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let source: BoxError = if errors.iter().all(NodeError::is_refused) {
        // `Error::Connect` names the endpoints already.
        "connection refused: nothing listens there; start redis-server, or correct the \
         host and port in the URL"
            .into()
    } else {
        let why = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if total > 1 {
            format!(
                "{} of {total} nodes answered, {quorum} needed ({why})",
                total - errors.len(),
            )
            .into()
        } else {
            why.into()
        }
    };
    Err(unreachable(config, endpoints, source))
}
