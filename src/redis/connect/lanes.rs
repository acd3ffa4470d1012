//! A node's two connections, its lanes: `WAIT` holds up every later
//! request of its connection until the replicas answer (for up to the node
//! timeout while one is down), so the scripts followed by `WAIT` (grants
//! and extends) have a connection of their own, and releases, reads and
//! waiters leaving never queue behind them (`link.rs`, `sentinel.rs`).

/// The two connections of a node.
#[derive(Clone)]
pub(crate) struct Lanes<C> {
    /// Every request but those followed by `WAIT`.
    pub plain: C,
    /// The scripts followed by `WAIT`.
    pub acked: C,
}

/// Which of a node's connections a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Plain,
    Acked,
}

impl<C: Clone> Lanes<C> {
    pub fn get(&self, lane: Lane) -> C {
        match lane {
            Lane::Plain => self.plain.clone(),
            Lane::Acked => self.acked.clone(),
        }
    }
}
