//! Lock names.

use std::fmt;

use crate::{Error, Result};

/// The path segment reserved for the backends' own records (waiter queues,
/// counters): no key may have it as a `/`-separated segment.
pub const RESERVED_SEGMENT: &str = "_OWNERS_";

/// The longest key accepted, in bytes.
///
/// etcd rejects requests over 1.5 MiB by default and every lock request
/// carries the key several times (compares and puts), so keys are capped well
/// below that.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The name of a lock, e.g. `"orders/nightly-export"`.
///
/// Any non-empty UTF-8 string of at most [`MAX_KEY_LEN`] bytes that has no
/// `/`-separated segment equal to `_OWNERS_` (reserved for the fair queue).
/// Keys are validated when used, so building one never fails.
///
/// # Examples
/// ```
/// use fairlock::Key;
/// let k = Key::from("jobs/export");
/// assert_eq!(k.to_string(), "jobs/export");
/// assert!(k.validate().is_ok());
/// assert!(Key::from("").validate().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// The key as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks that the key can name a lock.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when the key is empty, longer than
    /// [`MAX_KEY_LEN`], or has a segment equal to `_OWNERS_`.
    pub fn validate(&self) -> Result<()> {
        let reason = if self.0.is_empty() {
            "the key is empty; give the lock a name such as \"jobs/export\"".to_string()
        } else if self.0.len() > MAX_KEY_LEN {
            format!(
                "the key is {} bytes long; keys may be at most {MAX_KEY_LEN} bytes \
                 (hash long names first)",
                self.0.len()
            )
        } else if self.0.split('/').any(|s| s == RESERVED_SEGMENT) {
            format!(
                "the path segment {RESERVED_SEGMENT:?} is reserved for fairlock's waiter \
                 queue; rename that segment"
            )
        } else {
            return Ok(());
        };
        Err(Error::InvalidKey {
            key: shorten(&self.0),
            reason,
        })
    }
}

/// Shortens a long key for error messages.
fn shorten(s: &str) -> String {
    const KEEP: usize = 64;
    if s.len() <= KEEP {
        return s.to_string();
    }
    let mut end = KEEP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Key(s.to_string())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Key(s)
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Key(s.clone())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_segment_is_rejected_anywhere() {
        for k in ["_OWNERS_", "a/_OWNERS_", "_OWNERS_/a", "a/_OWNERS_/b"] {
            let err = Key::from(k).validate().unwrap_err();
            assert!(err.to_string().contains("reserved"), "{k}: {err}");
        }
        for k in ["a", "a/b", "x_OWNERS_", "_OWNERS_x/y", "ü/ñ"] {
            Key::from(k).validate().unwrap();
        }
    }

    #[test]
    fn long_key_error_is_short() {
        let long = "é".repeat(MAX_KEY_LEN);
        let err = Key::from(long).validate().unwrap_err().to_string();
        assert!(err.len() < 400, "{err}");
        assert!(err.contains("at most"), "{err}");
    }
}
