//! Go `time.Duration` strings, the format Consul uses for `TTL`, `LockDelay` and `?wait=`.

use std::time::Duration;

/// Formats a duration the way Go's api client sends it: whole seconds as `<n>s`, anything else
/// as whole milliseconds `<n>ms` (rounded up, so a non-zero duration never becomes `0`).
///
/// Never emits values below one millisecond except `0s`: Consul multiplies a `LockDelay` below
/// 1000 ns by one second, so `500ns` would mean 500 s.
pub fn format(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        let millis = duration.as_nanos().div_ceil(1_000_000);
        format!("{millis}ms")
    }
}

/// Parses a Go duration string such as `15s`, `1m30s`, `1500ms` or `0`. Negative values and
/// a missing unit (other than the bare `0`) are rejected, as Go does.
pub fn parse(text: &str) -> Result<Duration, DurationParseError> {
    let error = || DurationParseError(text.to_owned());
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(error());
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(error)?;
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(error()),
        };
        total_nanos = total_nanos
            .checked_add(scale(number, unit_nanos).ok_or_else(error)?)
            .ok_or_else(error)?;
        rest = tail;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| error())?;
    // The remainder is below 1e9 and therefore fits in u32.
    let nanos = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| error())?;
    Ok(Duration::new(secs, nanos))
}

/// `number` (digits with at most one `.`) times `unit_nanos`, truncated to whole nanoseconds.
fn scale(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(unit_nanos)?;
    let mut divisor: u128 = 1;
    for digit in fraction.chars() {
        divisor = divisor.checked_mul(10)?;
        let digit = u128::from(digit.to_digit(10)?);
        nanos = nanos.checked_add(digit.checked_mul(unit_nanos)? / divisor)?;
    }
    Some(nanos)
}

/// A string that is not a valid Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: expected a Go duration such as \"15s\", \"1m30s\" or \"500ms\"")]
pub struct DurationParseError(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_go_client() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_secs(15)), "15s");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format(Duration::from_nanos(1)), "1ms");
        assert_eq!(format(Duration::from_secs(600)), "600s");
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse("10us").unwrap(), Duration::from_micros(10));
        for bad in ["", "15", "s", "-1s", "1d", "1..5s", "."] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn round_trips() {
        for d in [Duration::from_secs(10), Duration::from_millis(250)] {
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
