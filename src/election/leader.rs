//! What observers see of an election's leader: [`Leader`], and the limit
//! on the value a leader shows them.

use std::time::SystemTime;

use crate::{Error, Owner, Result};

/// The longest value a candidate may campaign or a leader proclaim with,
/// in bytes.
///
/// Every observer receives the value on every change, and etcd refuses
/// requests over 1.5 MiB by default: keep what followers need to reach the
/// leader (an address, an id) and point to anything larger.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// The leader of an election, as an observer sees it
/// ([`crate::Elector::leader`], [`crate::LeaderWatch::next`]).
///
/// # Examples
/// ```no_run
/// # async fn demo(elector: &dyn fairlock::Elector) -> fairlock::Result<()> {
/// use fairlock::Key;
///
/// match elector.leader(&Key::from("scheduler")).await? {
///     Some(leader) => println!(
///         "{} leads (term {}, on {})",
///         String::from_utf8_lossy(&leader.value),
///         leader.fencing_token,
///         leader.owner.describe()
///     ),
///     None => println!("no leader"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The election's name.
    pub name: String,
    /// The value the leader campaigned with, or proclaimed last.
    pub value: Vec<u8>,
    /// The leader's term: its fencing token, which grows with every new
    /// leader of this election ([`crate::Leadership::fencing_token`]).
    pub fencing_token: u64,
    /// Who leads: process id, host, and when it started to campaign
    /// ([`Owner::requested_at`], by its clock).
    pub owner: Owner,
    /// When it was elected, by its clock.
    pub since: Option<SystemTime>,
}

impl Leader {
    /// The value as text, if it is UTF-8.
    #[must_use]
    pub fn value_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.value).ok()
    }
}

/// Checks that `value` may be campaigned with or proclaimed.
///
/// # Errors
/// [`Error::InvalidValue`] when it is longer than [`MAX_VALUE_LEN`].
pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() <= MAX_VALUE_LEN {
        return Ok(());
    }
    Err(Error::InvalidValue {
        reason: format!(
            "the value is {} bytes long; a leader's value may be at most {MAX_VALUE_LEN} bytes \
             (every observer receives it on every change): store large data elsewhere and \
             proclaim where to find it",
            value.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_up_to_the_limit_are_accepted() {
        assert!(check_value(b"").is_ok());
        assert!(check_value(&vec![b'x'; MAX_VALUE_LEN]).is_ok());
        let err = check_value(&vec![b'x'; MAX_VALUE_LEN + 1]).expect_err("too long");
        assert!(err.to_string().contains("65537 bytes"), "{err}");
    }
}
