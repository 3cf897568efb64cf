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

use super::config::{Behavior, Owner, SessionConfig};
use super::observe::LeaderRecord;
use super::planner::holder_from_value;

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
}
