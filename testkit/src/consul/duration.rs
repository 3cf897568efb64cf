//! Go's `time.ParseDuration` and `time.Duration.String`, byte for byte.
//!
//! Consul parses every duration it receives (session `TTL`, `LockDelay`, `?wait=`) with
//! Go's parser and prints durations in error messages with Go's formatter, so the emulator
//! reproduces both, including their error texts (`time: invalid duration "x"`,
//! `time: missing unit in duration "15"`, `time: unknown unit "d" in duration "1d"`).

use std::fmt;

/// A Go `time.ParseDuration` error; `Display` gives Go's exact message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDurationError(String);

impl fmt::Display for GoDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GoDurationError {}

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const LIMIT: u64 = 1 << 63;

fn unit_value(unit: &[u8]) -> Option<u64> {
    match unit {
        b"ns" => Some(NANOSECOND),
        // "us", "µs" (U+00B5 micro sign) and "μs" (U+03BC Greek mu).
        b"us" | [0xC2, 0xB5, b's'] | [0xCE, 0xBC, b's'] => Some(MICROSECOND),
        b"ms" => Some(MILLISECOND),
        b"s" => Some(SECOND),
        b"m" => Some(MINUTE),
        b"h" => Some(HOUR),
        _ => None,
    }
}

/// Go's internal `time.quote`: ASCII printable characters are kept (with `"` and `\`
/// escaped), every byte of anything else is written as `\xNN`.
fn go_time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !c.is_ascii() || (c as u32) < 0x20 {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

fn invalid(orig: &str) -> GoDurationError {
    GoDurationError(format!("time: invalid duration {}", go_time_quote(orig)))
}

/// Consumes leading ASCII digits; `None` on overflow past 2^63 (Go's `errLeadingInt`).
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Consumes leading ASCII digits of a fraction; stops accumulating precision on overflow.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let mut x: u64 = 0;
    let mut scale = 1.0_f64;
    let mut overflow = false;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

/// Parses a duration exactly like Go's `time.ParseDuration`, returning nanoseconds.
///
/// Accepts an optional sign and a sequence of decimal numbers with optional fraction and
/// a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`), e.g. `"300ms"`, `"-1.5h"`, `"2h45m"`.
/// A bare `"0"` is zero; any other unitless number is an error.
pub fn parse_go_duration(orig: &str) -> Result<i64, GoDurationError> {
    let mut s = orig.as_bytes();
    let mut d: u64 = 0;
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid(orig));
    }
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid(orig));
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(|| invalid(orig))?;
        s = rest;
        let pre = before != s.len();
        let mut post = false;
        let mut f = 0u64;
        let mut scale = 1.0f64;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            let (fr, sc, rest) = leading_fraction(s);
            f = fr;
            scale = sc;
            s = rest;
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid(orig));
        }
        let i = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if i == 0 {
            return Err(GoDurationError(format!(
                "time: missing unit in duration {}",
                go_time_quote(orig)
            )));
        }
        let unit_bytes = &s[..i];
        s = &s[i..];
        let Some(unit) = unit_value(unit_bytes) else {
            let unit_str = String::from_utf8_lossy(unit_bytes);
            return Err(GoDurationError(format!(
                "time: unknown unit {} in duration {}",
                go_time_quote(&unit_str),
                go_time_quote(orig)
            )));
        };
        if v > LIMIT / unit {
            return Err(invalid(orig));
        }
        v *= unit;
        if f > 0 {
            // Go converts with float64 here too (nanosecond accurate for fractions of hours).
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid(orig));
            }
        }
        d += v;
        if d > LIMIT {
            return Err(invalid(orig));
        }
    }
    if neg {
        // d <= 2^63 here, so the negation always fits.
        return Ok((d as i64).wrapping_neg());
    }
    if d > LIMIT - 1 {
        return Err(invalid(orig));
    }
    Ok(d as i64)
}

/// Writes the fraction `v / 10^prec` into the front of `out` (built right to left),
/// omitting trailing zeros and the dot when the fraction is zero. Returns `v / 10^prec`.
fn fmt_frac(out: &mut Vec<u8>, mut v: u64, prec: usize) -> u64 {
    let mut print = false;
    let mut digits = Vec::new();
    for _ in 0..prec {
        let digit = (v % 10) as u8;
        print = print || digit != 0;
        if print {
            digits.push(b'0' + digit);
        }
        v /= 10;
    }
    if print {
        digits.push(b'.');
    }
    out.extend(digits);
    v
}

fn fmt_int(out: &mut Vec<u8>, mut v: u64) {
    if v == 0 {
        out.push(b'0');
        return;
    }
    while v > 0 {
        out.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
}

/// Formats nanoseconds exactly like Go's `time.Duration.String`
/// (`"0s"`, `"1.5µs"`, `"10s"`, `"1m30s"`, `"24h0m0s"`, `"-2ms"`).
pub fn format_go_duration(d: i64) -> String {
    // Built in reverse, then flipped (multi-byte `µ` is pushed reversed too).
    let mut rev: Vec<u8> = Vec::with_capacity(32);
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    if u < SECOND {
        rev.push(b's');
        let prec;
        if u == 0 {
            return "0s".to_string();
        } else if u < MICROSECOND {
            prec = 0;
            rev.push(b'n');
        } else if u < MILLISECOND {
            prec = 3;
            rev.extend("µ".as_bytes().iter().rev());
        } else {
            prec = 6;
            rev.push(b'm');
        }
        u = fmt_frac(&mut rev, u, prec);
        fmt_int(&mut rev, u);
    } else {
        rev.push(b's');
        u = fmt_frac(&mut rev, u, 9);
        fmt_int(&mut rev, u % 60);
        u /= 60;
        if u > 0 {
            rev.push(b'm');
            fmt_int(&mut rev, u % 60);
            u /= 60;
            if u > 0 {
                rev.push(b'h');
                fmt_int(&mut rev, u);
            }
        }
    }
    if neg {
        rev.push(b'-');
    }
    rev.reverse();
    String::from_utf8_lossy(&rev).into_owned()
}

/// Converts nanoseconds to a `std::time::Duration`, clamping negatives to zero.
pub fn nanos_to_duration(ns: i64) -> std::time::Duration {
    std::time::Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

/// Converts a `std::time::Duration` to nanoseconds, saturating at `i64::MAX`.
pub fn duration_to_nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go() {
        let ok: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            ("5s", 5_000_000_000),
            ("30s", 30_000_000_000),
            ("1478s", 1_478_000_000_000),
            ("-5s", -5_000_000_000),
            ("+5s", 5_000_000_000),
            ("-0s", 0),
            ("5.0s", 5_000_000_000),
            ("5.6s", 5_600_000_000),
            ("5.s", 5_000_000_000),
            (".5s", 500_000_000),
            ("1.0s", 1_000_000_000),
            ("1.00s", 1_000_000_000),
            ("1.004s", 1_004_000_000),
            ("100.00100s", 100_001_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14_000_000_000),
            ("15m", 900_000_000_000),
            ("16h", 57_600_000_000_000),
            ("3h30m", 12_600_000_000_000),
            ("10.5s4m", 250_500_000_000),
            ("-2m3.4s", -123_400_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 1_200_000_000_000),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 360_000_000_000),
            ("600s", 600_000_000_000),
            ("15000ms", 15_000_000_000),
            ("1500ms", 1_500_000_000),
        ];
        for (input, want) in ok {
            assert_eq!(parse_go_duration(input), Ok(*want), "{input}");
        }
    }

    #[test]
    fn errors_like_go() {
        let bad: &[(&str, &str)] = &[
            ("", r#"time: invalid duration """#),
            ("3", r#"time: missing unit in duration "3""#),
            ("15", r#"time: missing unit in duration "15""#),
            ("-", r#"time: invalid duration "-""#),
            ("s", r#"time: invalid duration "s""#),
            (".", r#"time: invalid duration ".""#),
            ("-.", r#"time: invalid duration "-.""#),
            (".s", r#"time: invalid duration ".s""#),
            ("+.s", r#"time: invalid duration "+.s""#),
            ("x", r#"time: invalid duration "x""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
            ("10sec", r#"time: unknown unit "sec" in duration "10sec""#),
            ("1s ", r#"time: unknown unit "s " in duration "1s ""#),
            (" 1s", r#"time: invalid duration " 1s""#),
            (
                "9223372036854775808ns",
                r#"time: invalid duration "9223372036854775808ns""#,
            ),
            (
                "9223372036854775.808us",
                r#"time: invalid duration "9223372036854775.808us""#,
            ),
            (
                "-9223372036854775809ns",
                r#"time: invalid duration "-9223372036854775809ns""#,
            ),
            ("3000000h", r#"time: invalid duration "3000000h""#),
            ("\"x", r#"time: invalid duration "\"x""#),
            (
                "1é",
                r#"time: unknown unit "\xc3\xa9" in duration "1\xc3\xa9""#,
            ),
        ];
        for (input, want) in bad {
            let err = parse_go_duration(input).expect_err(input);
            assert_eq!(err.to_string(), *want, "{input}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (4 * 60 * 1_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60 * 1_000_000_000 + 5_001_000_000, "4m5.001s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (10_000_000_000, "10s"),
            (86_400_000_000_000, "24h0m0s"),
            (90_000_000_000, "1m30s"),
            (-2_000_000, "-2ms"),
            (1_000, "1µs"),
            (500, "500ns"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go_duration(*d), *want, "{d}");
        }
    }

    #[test]
    fn nanos_conversions_clamp() {
        assert_eq!(nanos_to_duration(-5), std::time::Duration::ZERO);
        assert_eq!(
            duration_to_nanos(std::time::Duration::from_secs(2)),
            2_000_000_000
        );
        assert_eq!(duration_to_nanos(std::time::Duration::MAX), i64::MAX);
    }
}
