//! The connection to etcd: every request fairlock sends goes through here.
//!
//! From the bottom up: each file uses only files listed before it.
//! - `secure.rs`: TLS options, and telling refused credentials and denied
//!   permissions apart;
//! - `error.rs`: the backend's private error type, told apart by gRPC code
//!   and mapped into [`crate::Error`];
//! - `request.rs`: one request with its timeout, hedged copies, the retry
//!   backoff; `request_body.rs`: request bodies whose message ends its
//!   HTTP/2 stream; `write_queue.rs`: how many writes of a connection are
//!   on their way, and which wait to go together; `batch.rs`: sending them,
//!   together in one txn while others are on their way;
//! - `in_doubt.rs`: a write its caller may stop waiting for, kept for
//!   the cleanup to finish;
//! - `stale_token.rs`: etcd's refusal of an auth token older than its last
//!   change to users or roles, read as one of an invalid token (on which
//!   etcd-client authenticates again);
//! - `members/`: which member a request goes to (how each has been
//!   answering, passing over members that stopped), sealed behind its
//!   `Routing`; `connect.rs`: connecting, and its errors;
//! - `inbox.rs`: where a watch's messages wait for their reader, and the
//!   fan-out of a shared watch by key; `watch.rs`: watches multiplexed on
//!   one stream; `own_watch.rs`: the long-lived ones reused across waits;
//! - `retry.rs`: the one rule by which a loop that sends a request again
//!   gives up (`Retrying`), and when a call whose attempt failed starts a
//!   new one (`Retry`).

pub(crate) mod batch;
pub(crate) mod connect;
pub(crate) mod error;
pub(crate) mod in_doubt;
pub(crate) mod inbox;
pub(crate) mod members;
pub(crate) mod own_watch;
pub(crate) mod request;
pub(crate) mod request_body;
pub(crate) mod retry;
pub(crate) mod secure;
pub(crate) mod stale_token;
pub(crate) mod watch;
pub(crate) mod write_queue;
