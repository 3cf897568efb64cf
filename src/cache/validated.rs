//! The validated configuration of each cached election, kept per object UID and
//! `metadata.generation`: a spec changes only with its generation, and the invariant checker,
//! the conflict check and the takeover would otherwise validate every election again and again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::crd::{LeaderElection, SpecProblem};
use crate::election::config::{ElectionConfig, ElectionKey};

/// The outcome of validating one version of a spec.
pub type Validation = Result<Arc<ElectionConfig>, Arc<[SpecProblem]>>;

/// One cached validation, valid for one incarnation (UID) and generation of the election.
#[derive(Debug)]
struct Entry {
    uid: String,
    generation: i64,
    outcome: Validation,
}

/// Validations by election.
#[derive(Debug, Default)]
pub struct Validated {
    entries: Mutex<HashMap<ElectionKey, Entry>>,
}

impl Validated {
    fn entries(&self) -> MutexGuard<'_, HashMap<ElectionKey, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The validated configuration of `le` (validated now unless this UID and generation
    /// already were). An object without UID or generation is validated every time.
    pub fn of(&self, key: &ElectionKey, le: &LeaderElection) -> Validation {
        let (Some(uid), Some(generation)) = (le.metadata.uid.as_ref(), le.metadata.generation)
        else {
            return validate(le);
        };
        if let Some(entry) = self.entries().get(key)
            && entry.uid == *uid
            && entry.generation == generation
        {
            return entry.outcome.clone();
        }
        let outcome = validate(le);
        self.entries().insert(
            key.clone(),
            Entry {
                uid: uid.clone(),
                generation,
                outcome: outcome.clone(),
            },
        );
        outcome
    }

    /// Forgets the elections for which `exists` is false.
    pub fn retain(&self, exists: impl Fn(&ElectionKey) -> bool) {
        self.entries().retain(|key, _| exists(key));
    }
}

fn validate(le: &LeaderElection) -> Validation {
    crate::crd::validate(le).map(Arc::new).map_err(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn election(uid: &str, generation: i64, ttl: &str) -> LeaderElection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": "ns", "uid": uid, "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "session": {"ttl": ttl}},
        }))
        .expect("an election")
    }

    fn key() -> ElectionKey {
        ElectionKey {
            namespace: "ns".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn a_new_generation_or_incarnation_is_validated_again() {
        let validated = Validated::default();
        assert!(validated.of(&key(), &election("u1", 1, "15s")).is_ok());
        // Same UID and generation: the cached outcome, whatever the object now says (a spec
        // never changes without its generation).
        assert!(validated.of(&key(), &election("u1", 1, "nonsense")).is_ok());
        assert!(
            validated
                .of(&key(), &election("u1", 2, "nonsense"))
                .is_err()
        );
        assert!(validated.of(&key(), &election("u2", 2, "15s")).is_ok());
        validated.retain(|_| false);
        assert!(
            validated
                .of(&key(), &election("u2", 2, "nonsense"))
                .is_err()
        );
    }
}
