//! Rule 3's adoption with rule 8's caution: a session found after a start is taken over only
//! when something only this install writes vouches for it. Its name alone proves nothing:
//! anybody with `session:write` (an Observe-mode application) can name a session like the
//! operator's, with a TTL of its own choosing, and destroy it at will.
//!
//! Two witnesses count: the election's status (only the operator writes it) recording the
//! session for the pod, or the key held by the session with a value naming this cluster,
//! install and pod (the operator's own acquisition). The pod's UID comes from the witness.
//! Either way, the session's own settings must be the ones the operator gives the election's
//! sessions ([`settings_match`]).

use std::time::Duration;

use super::config::{Behavior, Mode, Owner, SessionConfig};
use super::key_value::holder_from_value;
use super::observe::{LeaderRecord, LockView, Recorded};
use super::session_names::Found;

/// A session to read and perhaps adopt, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its ID.
    pub session: String,
    /// Where it was found: that decides what may vouch for it.
    pub found: Found,
}

/// The sessions a reconcile reads, in order, to take over an earlier process's session of a
/// Managed election it holds none for: the key's holder, then the one the status records
/// (the same session again when the key's value does not vouch for it but the status may).
/// The first that [`vouched_for`] accepts and the session manager takes is adopted.
pub fn candidates(
    mode: Mode,
    holds_session: bool,
    lock: &LockView,
    recorded: &Recorded,
) -> Vec<Candidate> {
    if mode != Mode::Managed || holds_session {
        return Vec::new();
    }
    let holder = match lock {
        LockView::Held { session, .. } => Some(Candidate {
            session: session.clone(),
            found: Found::HoldingKey,
        }),
        _ => None,
    };
    let in_status = recorded
        .leader
        .as_ref()
        .and_then(|leader| leader.session_id.clone())
        .map(|session| Candidate {
            session,
            found: Found::InStatus,
        });
    holder.into_iter().chain(in_status).collect()
}

/// What adopting a [`Candidate`] is judged on.
#[derive(Debug, Clone, Copy)]
pub struct Vouching<'a> {
    /// The pod the session's name says it was created for.
    pub pod: &'a str,
    /// The session's settings as Consul reports them.
    pub settings: &'a FoundSettings,
    /// The key as observed.
    pub lock: &'a LockView,
    /// The status as recorded.
    pub recorded: &'a Recorded,
    /// The session settings `status.applied` records.
    pub recorded_settings: Option<&'a SessionConfig>,
    /// The session settings the spec asks for.
    pub spec_settings: &'a SessionConfig,
    /// This install.
    pub owner: &'a Owner,
}

/// The UID of the pod `candidate` is to be adopted for, when its witness vouches for it
/// (the key's value for the key's holder, the status' leader record for the recorded one)
/// and its settings are the election's ([`settings_match`]).
pub fn vouched_for(candidate: &Candidate, v: &Vouching<'_>) -> Option<String> {
    if !settings_match(v.settings, v.recorded_settings, v.spec_settings) {
        return None;
    }
    match candidate.found {
        Found::HoldingKey => match v.lock {
            LockView::Held { session, value, .. } if *session == candidate.session => {
                vouched_by_key(value.as_deref(), v.owner, v.pod)
            }
            _ => None,
        },
        Found::InStatus => vouched_by_status(v.recorded.leader.as_ref(), &candidate.session, v.pod),
    }
}

/// The UID of `pod` when the status' leader record names `session` for it.
pub fn vouched_by_status(
    recorded: Option<&LeaderRecord>,
    session: &str,
    pod: &str,
) -> Option<String> {
    let leader = recorded?;
    (leader.session_id.as_deref() == Some(session) && leader.pod == pod).then(|| leader.uid.clone())
}

/// The UID of `pod` when the key's `value` (held by the session found) names this cluster's
/// install `owner` (now or before a rename) and `pod`.
pub fn vouched_by_key(value: Option<&[u8]>, owner: &Owner, pod: &str) -> Option<String> {
    let holder = holder_from_value(value?)?;
    let ours = match (holder.cluster.as_deref(), holder.install.as_deref()) {
        (Some(cluster), Some(install)) => owner.is(cluster, install),
        _ => false,
    };
    if ours && holder.pod == pod {
        holder.uid
    } else {
        None
    }
}

/// A found session's settings, as Consul reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundSettings {
    /// Its TTL (`None`: it has none).
    pub ttl: Option<Duration>,
    /// Its lock-delay.
    pub lock_delay: Duration,
    /// What Consul does with its locks when it is invalidated.
    pub behavior: Behavior,
}

/// Whether a found session has the settings this install created the election's sessions
/// with: those its status records as applied (`recorded`), or, with no record, those the spec
/// asks for. Anything else was chosen by somebody else, whatever vouches for its name and
/// value, and its TTL would become the election's Fence clock.
pub fn settings_match(
    found: &FoundSettings,
    recorded: Option<&SessionConfig>,
    spec: &SessionConfig,
) -> bool {
    let expected = recorded.unwrap_or(spec);
    found.ttl == Some(expected.ttl)
        && found.lock_delay == expected.lock_delay
        && found.behavior == expected.behavior
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn leader(pod: &str, session: Option<&str>) -> LeaderRecord {
        LeaderRecord {
            pod: pod.into(),
            uid: format!("uid-{pod}"),
            pod_ip: None,
            since: Timestamp::UNIX_EPOCH,
            session_id: session.map(str::to_owned),
        }
    }

    #[test]
    fn the_status_vouches_only_for_the_session_it_records_for_the_pod() {
        let recorded = leader("web-0", Some("s1"));
        assert_eq!(
            vouched_by_status(Some(&recorded), "s1", "web-0"),
            Some("uid-web-0".into())
        );
        assert_eq!(vouched_by_status(Some(&recorded), "s2", "web-0"), None);
        assert_eq!(vouched_by_status(Some(&recorded), "s1", "web-1"), None);
        assert_eq!(vouched_by_status(None, "s1", "web-0"), None);
        let unrecorded = leader("web-0", None);
        assert_eq!(vouched_by_status(Some(&unrecorded), "s1", "web-0"), None);
    }

    #[test]
    fn the_key_vouches_only_for_this_installs_value_for_the_pod() {
        let owner = Owner::new("blue", "ops.ce");
        let value = |cluster: &str, install: &str, pod: &str| {
            serde_json::json!({"pod": pod, "uid": "u-1", "cluster": cluster, "install": install})
                .to_string()
                .into_bytes()
        };
        let ours = value("blue", "ops.ce", "web-0");
        assert_eq!(
            vouched_by_key(Some(&ours), &owner, "web-0"),
            Some("u-1".into())
        );
        for other in [
            value("blue", "ops.ce", "web-1"),
            value("blue", "team.ce", "web-0"),
            value("green", "ops.ce", "web-0"),
            b"web-0".to_vec(),
        ] {
            assert_eq!(vouched_by_key(Some(&other), &owner, "web-0"), None);
        }
        assert_eq!(vouched_by_key(None, &owner, "web-0"), None);
        // After a rename, the former identity's value is this install's.
        let renamed =
            Owner::new("blue", "ops.renamed").with_former(vec![("blue".into(), "ops.ce".into())]);
        assert_eq!(
            vouched_by_key(Some(&ours), &renamed, "web-0"),
            Some("u-1".into())
        );
    }

    #[test]
    fn only_the_settings_the_operator_gives_match() {
        let secs = Duration::from_secs;
        let spec = SessionConfig {
            ttl: secs(15),
            lock_delay: secs(15),
            behavior: Behavior::Release,
        };
        let found = FoundSettings {
            ttl: Some(secs(15)),
            lock_delay: secs(15),
            behavior: Behavior::Release,
        };
        assert!(settings_match(&found, None, &spec));
        for other in [
            FoundSettings {
                ttl: Some(secs(3600)),
                ..found
            },
            FoundSettings { ttl: None, ..found },
            FoundSettings {
                lock_delay: secs(0),
                ..found
            },
            FoundSettings {
                behavior: Behavior::Delete,
                ..found
            },
        ] {
            assert!(!settings_match(&other, None, &spec), "{other:?}");
        }
        // The record of what was applied wins over a spec edited since.
        let recorded = SessionConfig {
            ttl: secs(30),
            ..spec
        };
        let applied = FoundSettings {
            ttl: Some(secs(30)),
            ..found
        };
        assert!(settings_match(&applied, Some(&recorded), &spec));
        assert!(!settings_match(&found, Some(&recorded), &spec));
    }

    fn recorded_for(pod: &str, session: &str) -> Recorded {
        Recorded {
            leader: Some(leader(pod, Some(session))),
            ..Recorded::default()
        }
    }

    fn held_by(session: &str, value: Option<Vec<u8>>) -> LockView {
        LockView::Held {
            session: session.into(),
            lock_index: 7,
            value,
        }
    }

    #[test]
    fn the_key_holder_is_read_before_the_session_the_status_records() {
        let recorded = recorded_for("web-0", "s-status");
        let lock = held_by("s-key", None);
        let found: Vec<_> = candidates(Mode::Managed, false, &lock, &recorded)
            .into_iter()
            .map(|c| (c.session, c.found))
            .collect();
        assert_eq!(
            found,
            [
                ("s-key".to_owned(), Found::HoldingKey),
                ("s-status".to_owned(), Found::InStatus)
            ]
        );
        let free = LockView::Free { lock_index: 7 };
        assert_eq!(
            candidates(Mode::Managed, false, &free, &recorded).len(),
            1,
            "only the recorded session when nobody holds the key"
        );
        // Nothing to adopt while holding a session, or in Observe mode.
        assert!(candidates(Mode::Managed, true, &lock, &recorded).is_empty());
        assert!(candidates(Mode::Observe, false, &lock, &recorded).is_empty());
    }

    #[test]
    fn a_candidate_is_adopted_only_on_its_own_witness_and_the_elections_settings() {
        let secs = Duration::from_secs;
        let spec = SessionConfig {
            ttl: secs(15),
            lock_delay: secs(15),
            behavior: Behavior::Release,
        };
        let settings = FoundSettings {
            ttl: Some(secs(15)),
            lock_delay: secs(15),
            behavior: Behavior::Release,
        };
        let owner = Owner::new("blue", "ops.ce");
        let value = serde_json::json!({"pod": "web-0", "uid": "u-key", "cluster": "blue", "install": "ops.ce"})
            .to_string()
            .into_bytes();
        let lock = held_by("s1", Some(value));
        let recorded = recorded_for("web-0", "s1");
        let vouching = Vouching {
            pod: "web-0",
            settings: &settings,
            lock: &lock,
            recorded: &recorded,
            recorded_settings: None,
            spec_settings: &spec,
            owner: &owner,
        };
        let holding = Candidate {
            session: "s1".into(),
            found: Found::HoldingKey,
        };
        let in_status = Candidate {
            session: "s1".into(),
            found: Found::InStatus,
        };
        assert_eq!(vouched_for(&holding, &vouching), Some("u-key".into()));
        assert_eq!(vouched_for(&in_status, &vouching), Some("uid-web-0".into()));
        // The key vouches only for the session holding it.
        let other = Candidate {
            session: "s2".into(),
            found: Found::HoldingKey,
        };
        assert_eq!(vouched_for(&other, &vouching), None);
        // Settings chosen by somebody else: never adopted, whatever vouches for it.
        let long = FoundSettings {
            ttl: Some(secs(3600)),
            ..settings
        };
        let chosen_elsewhere = Vouching {
            settings: &long,
            ..vouching
        };
        assert_eq!(vouched_for(&holding, &chosen_elsewhere), None);
        assert_eq!(vouched_for(&in_status, &chosen_elsewhere), None);
    }
}
