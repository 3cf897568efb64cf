//! Credential files re-read while the operator runs: the ACL token file and the TLS files are
//! rewritten in place by Vault agent, cert-manager or a Kubernetes Secret mount (an atomic
//! swap of its `..data` symlink), and the operator follows them without a restart.
//!
//! A [`Reloading`] reads its files at most once per period, measured from the last read, and
//! earlier when asked to ([`Reloading::reload_soon`]: Consul refused the token, a TLS
//! handshake failed). Files whose bytes did not change since the last read are not parsed
//! again. New contents that cannot be used (a half-written file, a key that does not match its
//! certificate) never replace the material in use: the previous material stays, the failure is
//! reported with a static reason, and the files are read again at the next period.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often credential files are re-read by default (`ELECTOR_CREDENTIALS_RELOAD`).
pub(crate) const DEFAULT_RELOAD_PERIOD: Duration = Duration::from_secs(5);

/// Why a credential's files could not be used, with a static reason for metrics and logs and
/// a detail naming the files (never their contents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadError {
    /// `snake_case`, chosen by the code.
    pub reason: &'static str,
    /// What went wrong, for the error a failed start reports.
    pub detail: String,
}

impl LoadError {
    /// A failure with `reason` and `detail`.
    pub(crate) fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

/// Where a credential comes from: files to read, and how their bytes become material.
pub(crate) trait CredentialSource: Send + Sync {
    /// What the files hold once parsed.
    type Material: Send + Sync;

    /// The `credential` label of its reload metric (`token`, `client_certificate`, `ca`).
    fn name(&self) -> &'static str;

    /// The bytes of every file, in a stable order.
    fn read(&self) -> Result<Vec<Vec<u8>>, LoadError>;

    /// The material the bytes hold. `previous` is the material in use (`None` at start).
    fn parse(
        &self,
        files: &[Vec<u8>],
        previous: Option<&Self::Material>,
    ) -> Result<Self::Material, LoadError>;
}

/// What one [`Reloading::refresh`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadOutcome {
    /// The period since the last read has not passed: nothing was read.
    NotDue,
    /// The files were read and hold the same bytes as at the last read: nothing was parsed.
    Unchanged,
    /// The files changed and their new material is in use.
    Reloaded,
    /// The files changed but could not be used (the reason); the previous material stays.
    Failed(&'static str),
}

impl ReloadOutcome {
    /// The `result` label of the reload metric, for outcomes worth counting (a reload or a
    /// failure); `None` when nothing changed.
    pub(crate) fn label(self) -> Option<&'static str> {
        match self {
            Self::NotDue | Self::Unchanged => None,
            Self::Reloaded => Some("reloaded"),
            Self::Failed(reason) => Some(reason),
        }
    }
}

/// A credential's material, re-read from its files at a bounded period.
pub(crate) struct Reloading<S: CredentialSource> {
    source: S,
    period: Duration,
    /// Set when the next refresh should read the files whatever the period says.
    soon: AtomicBool,
    state: Mutex<State<S::Material>>,
}

struct State<M> {
    material: Arc<M>,
    /// Hash of the bytes last read (whether they could be used or not).
    fingerprint: u64,
    last_read: Instant,
    /// Bumped at every reload, so a caller can tell whether the material changed since it
    /// took it.
    generation: u64,
}

impl<S: CredentialSource> Reloading<S> {
    /// Reads and parses the files at `now`. When they cannot be used, `fallback` decides:
    /// material to start with anyway, or the error the start fails with.
    pub(crate) fn load(
        source: S,
        period: Duration,
        now: Instant,
        fallback: impl FnOnce(LoadError) -> Result<S::Material, LoadError>,
    ) -> Result<Self, LoadError> {
        let files = source.read()?;
        let material = source.parse(&files, None).or_else(fallback)?;
        Ok(Self {
            source,
            period,
            soon: AtomicBool::new(false),
            state: Mutex::new(State {
                material: Arc::new(material),
                fingerprint: fingerprint(&files),
                last_read: now,
                generation: 0,
            }),
        })
    }

    /// The material in use and its generation.
    pub(crate) fn current(&self) -> (Arc<S::Material>, u64) {
        let state = self.lock();
        (state.material.clone(), state.generation)
    }

    /// The credential's name (the metric's `credential` label).
    pub(crate) fn name(&self) -> &'static str {
        self.source.name()
    }

    /// Makes the next [`refresh`](Self::refresh) read the files even if the period has not
    /// passed (the material in use was just refused).
    pub(crate) fn reload_soon(&self) {
        self.soon.store(true, Ordering::Relaxed);
    }

    /// Reads the files if the period has passed since the last read (or a reload was asked
    /// for), and uses their material if it changed and can be used.
    pub(crate) fn refresh(&self, now: Instant) -> ReloadOutcome {
        let mut state = self.lock();
        let due = now.saturating_duration_since(state.last_read) >= self.period;
        if !due && !self.soon.swap(false, Ordering::Relaxed) {
            return ReloadOutcome::NotDue;
        }
        state.last_read = now;
        let files = match self.source.read() {
            Ok(files) => files,
            Err(error) => return ReloadOutcome::Failed(error.reason),
        };
        let fingerprint = fingerprint(&files);
        if fingerprint == state.fingerprint {
            return ReloadOutcome::Unchanged;
        }
        match self.source.parse(&files, Some(&state.material)) {
            Ok(material) => {
                state.material = Arc::new(material);
                state.fingerprint = fingerprint;
                state.generation += 1;
                ReloadOutcome::Reloaded
            }
            // The fingerprint stays the old one: the same broken bytes fail again (and are
            // counted again) at every period until they are fixed.
            Err(error) => ReloadOutcome::Failed(error.reason),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<S::Material>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<S: CredentialSource> std::fmt::Debug for Reloading<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("credential", &self.source.name())
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

/// A hash of the files' bytes: enough to tell a rewrite from the same contents.
fn fingerprint(files: &[Vec<u8>]) -> u64 {
    let mut hasher = DefaultHasher::new();
    files.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A source over an in-memory "file" whose material is its text, refusing `broken`.
    struct Fake {
        contents: Mutex<Vec<u8>>,
        parses: AtomicUsize,
    }

    impl CredentialSource for &Fake {
        type Material = String;

        fn name(&self) -> &'static str {
            "fake"
        }

        fn read(&self) -> Result<Vec<Vec<u8>>, LoadError> {
            Ok(vec![self.contents.lock().unwrap().clone()])
        }

        fn parse(&self, files: &[Vec<u8>], _: Option<&String>) -> Result<String, LoadError> {
            self.parses.fetch_add(1, Ordering::Relaxed);
            match std::str::from_utf8(&files[0]) {
                Ok("broken") | Err(_) => Err(LoadError::new("broken", "unusable")),
                Ok(text) => Ok(text.to_owned()),
            }
        }
    }

    fn fake(text: &str) -> Fake {
        Fake {
            contents: Mutex::new(text.as_bytes().to_vec()),
            parses: AtomicUsize::new(0),
        }
    }

    const PERIOD: Duration = Duration::from_secs(5);

    #[test]
    fn reads_only_after_the_period_and_parses_only_changes() {
        let file = fake("a");
        let start = Instant::now();
        let reloading = Reloading::load(&file, PERIOD, start, Err).unwrap();
        assert_eq!(file.parses.load(Ordering::Relaxed), 1);

        *file.contents.lock().unwrap() = b"b".to_vec();
        let early = start + PERIOD - Duration::from_millis(1);
        assert_eq!(reloading.refresh(early), ReloadOutcome::NotDue);
        assert_eq!(*reloading.current().0, "a");

        let due = start + PERIOD;
        assert_eq!(reloading.refresh(due), ReloadOutcome::Reloaded);
        assert_eq!(reloading.current(), (Arc::new("b".to_owned()), 1));
        assert_eq!(file.parses.load(Ordering::Relaxed), 2);

        // The period counts from the last read; unchanged bytes are not parsed again.
        assert_eq!(reloading.refresh(due + PERIOD / 2), ReloadOutcome::NotDue);
        assert_eq!(reloading.refresh(due + PERIOD), ReloadOutcome::Unchanged);
        assert_eq!(file.parses.load(Ordering::Relaxed), 2);
        assert_eq!(reloading.current().1, 1);
    }

    #[test]
    fn broken_contents_keep_the_material_in_use_until_fixed() {
        let file = fake("a");
        let start = Instant::now();
        let reloading = Reloading::load(&file, PERIOD, start, Err).unwrap();
        *file.contents.lock().unwrap() = b"broken".to_vec();
        assert_eq!(
            reloading.refresh(start + PERIOD),
            ReloadOutcome::Failed("broken")
        );
        assert_eq!(reloading.current(), (Arc::new("a".to_owned()), 0));
        assert_eq!(
            reloading.refresh(start + PERIOD * 2),
            ReloadOutcome::Failed("broken"),
            "tried again at every period"
        );
        *file.contents.lock().unwrap() = b"c".to_vec();
        assert_eq!(
            reloading.refresh(start + PERIOD * 3),
            ReloadOutcome::Reloaded
        );
        assert_eq!(*reloading.current().0, "c");
    }

    #[test]
    fn a_reload_asked_for_reads_before_the_period() {
        let file = fake("a");
        let start = Instant::now();
        let reloading = Reloading::load(&file, PERIOD, start, Err).unwrap();
        *file.contents.lock().unwrap() = b"b".to_vec();
        reloading.reload_soon();
        let soon = start + Duration::from_millis(1);
        assert_eq!(reloading.refresh(soon), ReloadOutcome::Reloaded);
        assert_eq!(
            reloading.refresh(soon),
            ReloadOutcome::NotDue,
            "asked once, read once"
        );
    }

    #[test]
    fn unusable_files_at_start_use_the_fallback_or_fail() {
        let file = fake("broken");
        let start = Instant::now();
        let error = Reloading::load(&file, PERIOD, start, Err).unwrap_err();
        assert_eq!(error.reason, "broken");
        let reloading =
            Reloading::load(&file, PERIOD, start, |_| Ok("fallback".to_owned())).unwrap();
        assert_eq!(*reloading.current().0, "fallback");
        assert_eq!(
            reloading.refresh(start + PERIOD),
            ReloadOutcome::Unchanged,
            "the same bytes are not parsed again"
        );
    }
}
