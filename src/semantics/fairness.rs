//! Fair or unfair: the one mode switch of every backend, as a type.

/// Whether waiters are granted a lock in arrival order.
///
/// The public API takes `fair: bool` (`get_locker(fair)`); inside the crate
/// the mode travels as this enum so call sites say what they mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fairness {
    /// Waiters are granted the lock in the order they asked for it.
    Fair,
    /// Any waiter may take a free lock; faster, no order promised.
    Unfair,
}

impl Fairness {
    /// The mode for the public API's `fair` flag.
    pub(crate) fn from_fair(fair: bool) -> Self {
        if fair { Self::Fair } else { Self::Unfair }
    }

    /// `true` for [`Fairness::Fair`].
    pub(crate) fn is_fair(self) -> bool {
        self == Self::Fair
    }

    /// `"fair"` or `"unfair"`, as logs and metrics label the mode.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Fair => "fair",
            Self::Unfair => "unfair",
        }
    }
}
