//! `CONSUL_HTTP_TOKEN_FILE`, re-read while the operator runs (see [`super::reload`]): Vault
//! agent and Secret mounts rewrite it when the token rotates.

use std::path::PathBuf;

use http::HeaderValue;

use super::reload::{CredentialSource, LoadError};
use super::token::ConsulToken;

/// A token and its `X-Consul-Token` header value (marked sensitive).
#[derive(Clone)]
pub(crate) struct TokenHeader {
    pub(crate) token: ConsulToken,
    pub(crate) header: HeaderValue,
}

impl TokenHeader {
    /// The header of `token`; fails when the token is not a valid header value.
    pub(crate) fn new(token: ConsulToken) -> Result<Self, LoadError> {
        let header = token
            .header_value()
            .map_err(|error| LoadError::new("invalid_header", error.to_string()))?;
        Ok(Self { token, header })
    }
}

impl std::fmt::Debug for TokenHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.token.fmt(f)
    }
}

/// The token file. Its material is the token (`None`: no token, the agent's default).
#[derive(Debug)]
pub(crate) struct TokenFile {
    pub(crate) path: PathBuf,
}

impl CredentialSource for TokenFile {
    type Material = Option<TokenHeader>;

    fn name(&self) -> &'static str {
        "token"
    }

    fn read(&self) -> Result<Vec<Vec<u8>>, LoadError> {
        std::fs::read(&self.path)
            .map(|bytes| vec![bytes])
            .map_err(|error| {
                LoadError::new(
                    "unreadable",
                    format!("cannot read {}: {}", self.path.display(), error.kind()),
                )
            })
    }

    /// An empty file is refused (`empty`): it is what a writer that truncates before it writes
    /// leaves for a moment, so the token in use stays. At start, the caller's fallback decides
    /// (`CONSUL_HTTP_TOKEN`, as in Consul's Go client).
    fn parse(
        &self,
        files: &[Vec<u8>],
        _previous: Option<&Self::Material>,
    ) -> Result<Self::Material, LoadError> {
        let bytes = files.first().map(Vec::as_slice).unwrap_or_default();
        let text = std::str::from_utf8(bytes).map_err(|_| {
            LoadError::new(
                "not_utf8",
                format!("{} is not UTF-8 text", self.path.display()),
            )
        })?;
        let token = ConsulToken::new(text)
            .ok_or_else(|| LoadError::new("empty", format!("{} is empty", self.path.display())))?;
        TokenHeader::new(token).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::reload::{ReloadOutcome, Reloading};
    use std::time::{Duration, Instant};

    const PERIOD: Duration = Duration::from_secs(2);

    fn token_of(reloading: &Reloading<TokenFile>) -> Option<ConsulToken> {
        reloading
            .current()
            .0
            .as_ref()
            .as_ref()
            .map(|t| t.token.clone())
    }

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("consul-token-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    #[test]
    fn a_rewritten_file_is_picked_up_and_a_broken_one_keeps_the_token() {
        let dir = dir("rewrite");
        let path = dir.0.join("token");
        std::fs::write(&path, "token-a\n").unwrap();
        let start = Instant::now();
        let reloading =
            Reloading::load(TokenFile { path: path.clone() }, PERIOD, start, Err).unwrap();
        assert_eq!(token_of(&reloading), ConsulToken::new("token-a"));

        std::fs::write(&path, "token-b").unwrap();
        assert_eq!(reloading.refresh(start + PERIOD), ReloadOutcome::Reloaded);
        assert_eq!(token_of(&reloading), ConsulToken::new("token-b"));

        for (i, (broken, reason)) in (2..).zip([
            (&b""[..], "empty"),
            (&b"\xff\xfe"[..], "not_utf8"),
            (&b"bad\x07token"[..], "invalid_header"),
        ]) {
            std::fs::write(&path, broken).unwrap();
            assert_eq!(
                reloading.refresh(start + PERIOD * i),
                ReloadOutcome::Failed(reason)
            );
            assert_eq!(
                token_of(&reloading),
                ConsulToken::new("token-b"),
                "{reason}"
            );
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            reloading.refresh(start + PERIOD * 5),
            ReloadOutcome::Failed("unreadable")
        );
        assert_eq!(token_of(&reloading), ConsulToken::new("token-b"));
    }

    #[test]
    fn failures_never_show_the_token() {
        let dir = dir("secret");
        let path = dir.0.join("token");
        std::fs::write(&path, "s3cr3t\x07value").unwrap();
        let error = Reloading::load(TokenFile { path }, PERIOD, Instant::now(), Err).unwrap_err();
        assert_eq!(error.reason, "invalid_header");
        assert!(!error.detail.contains("s3cr3t"), "{}", error.detail);
    }
}
