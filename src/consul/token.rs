//! The Consul ACL token: a secret that is only ever written into the `X-Consul-Token` header.

use std::fmt;

use http::HeaderValue;

/// A Consul ACL token (the token's *SecretID*).
///
/// The value cannot be printed: `Debug` shows `ConsulToken(<redacted>)`, there is no `Display`,
/// and the only way out of this type is [`ConsulToken::header_value`], which produces a header
/// value marked as sensitive (so HTTP libraries never log it). The token is never placed in a
/// URL (Consul's `?token=` parameter ends up in access logs) and never in an error message.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ConsulToken(String);

impl ConsulToken {
    /// Wraps a token. Surrounding whitespace (for example a trailing newline from a mounted
    /// Secret) is trimmed. Returns `None` for an empty token, which means "no token".
    pub fn new(token: impl Into<String>) -> Option<Self> {
        let token = token.into();
        let trimmed = token.trim();
        if trimmed.is_empty() {
            None
        } else if trimmed.len() == token.len() {
            Some(Self(token))
        } else {
            Some(Self(trimmed.to_owned()))
        }
    }

    /// The `X-Consul-Token` header value, marked sensitive. Fails when the token contains bytes
    /// that are not allowed in an HTTP header value (the error does not contain the token).
    pub fn header_value(&self) -> Result<HeaderValue, InvalidTokenError> {
        let mut value = HeaderValue::from_str(&self.0).map_err(|_| InvalidTokenError)?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// Replaces every occurrence of the token in `text` with `<redacted>`. Used on text that
    /// comes back from the network before it is stored in an error, as a defence against a proxy
    /// or server that echoes request headers.
    pub(crate) fn redact(&self, text: &str) -> String {
        text.replace(&self.0, "<redacted>")
    }
}

impl fmt::Debug for ConsulToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConsulToken(<redacted>)")
    }
}

/// The token contains characters that cannot be sent in an HTTP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the Consul token contains characters that are not valid in an HTTP header")]
pub struct InvalidTokenError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_rejects_empty() {
        assert_eq!(ConsulToken::new("  \n"), None);
        let token = ConsulToken::new(" abc\n").unwrap();
        assert_eq!(token.header_value().unwrap(), "abc");
    }

    #[test]
    fn never_printed() {
        let token = ConsulToken::new("s3cr3t-value").unwrap();
        assert_eq!(format!("{token:?}"), "ConsulToken(<redacted>)");
        let header = token.header_value().unwrap();
        assert!(header.is_sensitive());
        assert!(!format!("{header:?}").contains("s3cr3t"));
    }

    #[test]
    fn header_rejects_control_characters() {
        let token = ConsulToken::new("a\u{7}b").unwrap();
        let error = token.header_value().unwrap_err();
        assert!(!error.to_string().contains("a\u{7}b"));
    }

    #[test]
    fn redacts_echoes() {
        let token = ConsulToken::new("tok").unwrap();
        assert_eq!(token.redact("bad tok here"), "bad <redacted> here");
    }
}
