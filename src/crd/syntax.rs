//! The patterns of [`rules`](super::rules) as plain Rust predicates, for the validation of
//! specs the API server did not check (clusters without CEL, objects built in code). Each
//! predicate accepts exactly what its regular expression accepts; `tests/it/crd_cel.rs` checks
//! both on the same samples.

/// `LABEL_KEY_PATTERN` and `LABEL_KEY_PREFIX_PATTERN`: `[prefix/]name`.
pub(crate) fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            prefix.len() <= 253 && is_dns_subdomain(prefix) && is_label_name(name)
        }
        None => is_label_name(key),
    }
}

/// `LABEL_VALUE_PATTERN`: 1 to 63 of `A-Z a-z 0-9 - _ .`, alphanumeric at both ends.
pub(crate) fn is_label_value(value: &str) -> bool {
    is_label_name(value)
}

/// `SELECTOR_VALUE_PATTERN`: a label value or the empty string.
pub(crate) fn is_selector_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// The name part of a label key, and a non-empty label value.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `SECRET_NAME_PATTERN` (without the length limit): dot-separated DNS labels of lowercase
/// letters, digits and `-`, alphanumeric at both ends.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    name.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                is_lower_alphanumeric(*first)
                    && is_lower_alphanumeric(*last)
                    && bytes
                        .iter()
                        .all(|b| is_lower_alphanumeric(*b) || *b == b'-')
            }
            _ => false,
        }
    })
}

fn is_lower_alphanumeric(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit()
}

/// `DURATION_PATTERN`: `0`, or `<digits>[.<digits>]<unit>` repeated, unit one of
/// `ns us ms s m h`.
pub(crate) fn is_duration(text: &str) -> bool {
    if text == "0" {
        return true;
    }
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some(after_number) = strip_decimal(rest) else {
            return false;
        };
        let Some(after_unit) = ["ns", "us", "ms", "s", "m", "h"]
            .iter()
            .find_map(|unit| after_number.strip_prefix(unit))
        else {
            return false;
        };
        rest = after_unit;
    }
    true
}

/// `text` after a leading `<digits>[.<digits>]`, or `None` when it does not start with one.
fn strip_decimal(text: &str) -> Option<&str> {
    let rest = strip_digits(text)?;
    match rest.strip_prefix('.') {
        Some(fraction) => strip_digits(fraction),
        None => Some(rest),
    }
}

/// `text` after one or more leading ASCII digits, or `None` when it starts with none.
fn strip_digits(text: &str) -> Option<&str> {
    let rest = text.trim_start_matches(|c: char| c.is_ascii_digit());
    (rest.len() < text.len()).then_some(rest)
}

/// `CONSUL_KEY_CHARACTERS_PATTERN` without the space: what a Consul key may contain.
pub(crate) fn is_consul_key_character(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ',' | '/')
}

/// `CONSUL_ADDRESS_PATTERN`: an optional `http://` or `https://`, then at least one character
/// other than `/ ? # @` and space, then an optional `/`.
pub(crate) fn is_consul_address(address: &str) -> bool {
    let rest = address
        .strip_prefix("https://")
        .or_else(|| address.strip_prefix("http://"))
        .unwrap_or(address);
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    !authority.is_empty() && !authority.contains(['/', '?', '#', '@', ' '])
}

/// `DATACENTER_PATTERN`.
pub(crate) fn is_datacenter(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// `TENANCY_PATTERN`.
pub(crate) fn is_tenancy(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// `SECRET_KEY_PATTERN`.
pub(crate) fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys() {
        let long_name = "a".repeat(63);
        let long_prefix = format!("{}.b", "a".repeat(251));
        for good in [
            "app",
            "elector.dev/role",
            "a",
            "A_b-c.D",
            "k8s.io/x",
            long_name.as_str(),
            &format!("{long_prefix}/{long_name}"),
        ] {
            assert!(is_label_key(good), "{good:?} is a label key");
        }
        for bad in [
            "",
            "/role",
            "elector.dev/",
            "Elector.dev/role",
            "a/b/c",
            "-app",
            "app-",
            "has space",
            "star*",
            "a..b/c",
            ".dev/role",
            &"a".repeat(64),
            &format!("{long_prefix}x/role"),
        ] {
            assert!(!is_label_key(bad), "{bad:?} is not a label key");
        }
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("leader"));
        assert!(is_label_value("v1.2_3-x"));
        assert!(!is_label_value(""));
        assert!(!is_label_value("-x"));
        assert!(!is_label_value("x."));
        assert!(!is_label_value("a/b"));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(is_selector_value(""));
        assert!(!is_selector_value(" "));
    }

    #[test]
    fn durations() {
        for good in [
            "0", "0s", "15s", "1m30s", "500ms", "1.5h", "10us", "3ns", "1h0m0s",
        ] {
            assert!(is_duration(good), "{good:?} is a duration");
        }
        for bad in [
            "", "15", "s", "-1s", "+1s", " 15s", "15s ", "1 s", "1d", ".5s", "1.s", "1..5s", "1µs",
            "00", "1e3s", "15S",
        ] {
            assert!(!is_duration(bad), "{bad:?} is not a duration");
        }
    }

    #[test]
    fn consul_addresses() {
        for good in [
            "consul:8500",
            "https://consul.consul.svc:8501",
            "http://10.0.0.1:8500/",
            "[::1]:8500",
        ] {
            assert!(is_consul_address(good), "{good:?} is an address");
        }
        for bad in [
            "",
            "https://",
            "https://host/path",
            "user@host",
            "host name",
            "host?x",
            "//",
        ] {
            assert!(!is_consul_address(bad), "{bad:?} is not an address");
        }
    }

    #[test]
    fn names() {
        assert!(is_dns_subdomain("consul-token"));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("Consul"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("-a"));
        assert!(is_datacenter("dc1"));
        assert!(is_datacenter("eu_West-1"));
        assert!(!is_datacenter("dc 1"));
        assert!(!is_datacenter(""));
        assert!(is_tenancy("team-a"));
        assert!(is_tenancy("Default"));
        assert!(is_tenancy("a"));
        for invalid in ["", "-a", "a-", "team_a", "team.a", "a b"] {
            assert!(!is_tenancy(invalid), "{invalid:?}");
        }
        assert!(is_secret_key("token"));
        assert!(is_secret_key(".token_file-1"));
        assert!(!is_secret_key("to/ken"));
        assert!(!is_secret_key(""));
        assert!(is_consul_key_character(','));
        assert!(!is_consul_key_character(' '));
        assert!(!is_consul_key_character('*'));
    }
}
