//! Durations as people write them on command lines and in environment
//! variables.

use std::time::Duration;

/// Parses durations like `500ms`, `10s`, `2m`, `1h` or plain seconds (`10`).
///
/// # Errors
/// A message saying what was expected.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use fairlock::parse_duration;
/// assert_eq!(parse_duration("1500ms").unwrap(), Duration::from_millis(1500));
/// assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; use e.g. 500ms, 10s, 2m"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?}; use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{s:?} is out of range"))
}
