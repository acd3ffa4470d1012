//! Durations as people write them on command lines and in environment
//! variables.

use std::time::Duration;

/// Parses durations like `500ms`, `10s`, `2m`, `1h`, `1h 30m`, `1.5s` or
/// plain seconds (`10`, `0.5`).
///
/// Units and combinations are those of the `humantime` crate (`ms`, `s`,
/// `m`, `h`, `d`, and their long names); a number without a unit is
/// seconds, and a number with a fraction takes one unit of `ms`, `s`, `m`
/// or `h`.
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
/// assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let number = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.');
    if number(s) {
        return scaled(s, s, 1.0);
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(d),
        Err(e) => {
            // humantime takes whole numbers only: `1.5s` and the like.
            let split = s.find(|c: char| !c.is_ascii_digit() && c != '.');
            if let Some((num, unit)) = split.map(|i| s.split_at(i))
                && number(num)
                && num.contains('.')
            {
                let scale = match unit.trim() {
                    "ms" => 0.001,
                    "s" => 1.0,
                    "m" => 60.0,
                    "h" => 3600.0,
                    other => {
                        return Err(format!(
                            "unknown unit {other:?} in {s:?}; use ms, s, m or h"
                        ));
                    }
                };
                return scaled(s, num, scale);
            }
            Err(format!(
                "{s:?} is not a duration ({e}); use e.g. 500ms, 10s, 2m"
            ))
        }
    }
}

fn scaled(s: &str, num: &str, scale: f64) -> Result<Duration, String> {
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; use e.g. 500ms, 10s, 2m"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{s:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn accepts_the_documented_forms() {
        for (s, d) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("10", Duration::from_secs(10)),
            (" 10s ", Duration::from_secs(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25", Duration::from_millis(250)),
            ("1h 30m", Duration::from_secs(5400)),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s:?}");
        }
    }

    #[test]
    fn refuses_the_rest_with_a_message() {
        for s in ["", "soon", "-5", "10x", "1.5x", "1..2s", "s"] {
            let err = parse_duration(s).expect_err(s);
            assert!(
                err.contains("duration") || err.contains("unit"),
                "{s:?}: {err}"
            );
        }
    }
}
