//! URL handling with Go's `net/url` semantics: query parsing (`url.ParseQuery`), query
//! encoding (`url.Values.Encode`), path unescaping, plus `strconv` helpers whose error
//! texts Consul returns verbatim.

use std::collections::BTreeMap;

/// A parsed query string, in Go's `url.Values` semantics.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Go's `unescape`: `%XX` must be two hex digits; `+` means space only in query mode.
fn unescape(s: &str, plus_is_space: bool) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_val);
                let lo = bytes.get(i + 2).copied().and_then(hex_val);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => {
                        out.push(hi << 4 | lo);
                        i += 3;
                    }
                    _ => {
                        let end = (i + 3).min(bytes.len());
                        let bad = String::from_utf8_lossy(&bytes[i..end]);
                        return Err(format!("invalid URL escape {}", go_quote(&bad)));
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Unescapes a URL path like Go's `URL.Path` (`+` stays `+`); invalid UTF-8 is an error.
pub(crate) fn decode_path(raw: &str) -> Result<String, String> {
    let bytes = unescape(raw, false)?;
    String::from_utf8(bytes).map_err(|_| "invalid UTF-8 in URL path".to_string())
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Query {
    /// Parses a raw query string like Go's `url.ParseQuery`: pairs split on `&`, empty
    /// pairs and pairs with `;` or a bad escape are dropped, `+` is a space.
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        let mut pairs = Vec::new();
        for part in raw.unwrap_or("").split('&') {
            if part.is_empty() || part.contains(';') {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let (Ok(k), Ok(v)) = (unescape(k, true), unescape(v, true)) else {
                continue;
            };
            pairs.push((
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            ));
        }
        Query { pairs }
    }

    /// Whether the parameter is present (with or without a value), like `_, ok := params[k]`.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }

    /// The first value of the parameter, like `params.Get(k)` (but `None` when absent).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Go's `url.Values.Encode`: keys sorted, values in order, both query-escaped.
    pub(crate) fn encode(&self) -> String {
        let mut sorted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (k, v) in &self.pairs {
            sorted.entry(k).or_default().push(v);
        }
        let mut parts = Vec::new();
        for (k, vs) in sorted {
            for v in vs {
                parts.push(format!("{}={}", query_escape(k), query_escape(v)));
            }
        }
        parts.join("&")
    }
}

/// Go's `strconv.Quote` (close enough: printable characters kept, others escaped).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.ParseUint(s, 10, 64)` with its exact error texts.
pub(crate) fn parse_uint(s: &str) -> Result<u64, String> {
    let syntax = || format!("strconv.ParseUint: parsing {}: invalid syntax", go_quote(s));
    if s.is_empty() {
        return Err(syntax());
    }
    let mut n: u64 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return Err(syntax());
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or_else(|| {
                format!(
                    "strconv.ParseUint: parsing {}: value out of range",
                    go_quote(s)
                )
            })?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_queries_like_go() {
        let q = Query::parse(Some("&a=b&&recurse&x=1%202&y=a+b&bad=%zz&semi=1;2&k&k=2"));
        assert_eq!(q.get("a"), Some("b"));
        assert!(q.has("recurse"));
        assert_eq!(q.get("recurse"), Some(""));
        assert_eq!(q.get("x"), Some("1 2"));
        assert_eq!(q.get("y"), Some("a b"));
        assert!(!q.has("bad"));
        assert!(!q.has("semi"));
        assert_eq!(q.get("k"), Some(""));
        assert!(!q.has("missing"));
        assert!(!Query::parse(None).has(""));
    }

    #[test]
    fn encodes_sorted_and_escaped() {
        let q = Query::parse(Some("cas=5&acquire=abc-123&recurse&x=a%2Fb+c"));
        assert_eq!(q.encode(), "acquire=abc-123&cas=5&recurse=&x=a%2Fb+c");
    }

    #[test]
    fn decodes_paths() {
        assert_eq!(decode_path("/v1/kv/a%2Fb+c").as_deref(), Ok("/v1/kv/a/b+c"));
        assert_eq!(
            decode_path("/v1/kv/%zz"),
            Err("invalid URL escape \"%zz\"".to_string())
        );
        assert!(decode_path("/v1/kv/%ff").is_err());
    }

    #[test]
    fn parse_uint_texts() {
        assert_eq!(parse_uint("42"), Ok(42));
        assert_eq!(parse_uint("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse_uint("abc"),
            Err("strconv.ParseUint: parsing \"abc\": invalid syntax".to_string())
        );
        assert_eq!(
            parse_uint("-1"),
            Err("strconv.ParseUint: parsing \"-1\": invalid syntax".to_string())
        );
        assert_eq!(
            parse_uint(""),
            Err("strconv.ParseUint: parsing \"\": invalid syntax".to_string())
        );
        assert_eq!(
            parse_uint("18446744073709551616"),
            Err(
                "strconv.ParseUint: parsing \"18446744073709551616\": value out of range"
                    .to_string()
            )
        );
    }
}
