//! Which member of the etcd cluster a request goes to, sealed behind one
//! type: the connection (`connect.rs`) builds its channel from
//! [`Routing`], and nothing else reaches inside.
//! - `health.rs`: how each member has been answering;
//! - `balance.rs`: the channel that sends each request to a member,
//!   passing over members that stopped answering.

mod balance;
mod health;

pub(crate) use health::Routing;
