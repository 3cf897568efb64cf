//! The value the operator writes into an election's key when it acquires it for a pod, and
//! how a value names its holder. Tools outside Kubernetes read who holds the lock from it;
//! after a restart it vouches for the key's session as this install's (rule 3 with rule 8's
//! caution, [`super::adoption::vouched_by_key`]).

use jiff::Timestamp;

use super::config::{ElectionKey, Owner};

/// The pod a value is written for, as observed.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    /// The pod.
    pub pod: &'a str,
    /// Its UID.
    pub uid: Option<&'a str>,
    /// Its IP.
    pub pod_ip: Option<&'a str>,
    /// Its node.
    pub node: Option<&'a str>,
}

/// The value written with an acquisition for `holding` of `election`'s key by install
/// `owner` at `now`: JSON with the pod, its namespace, UID, IP and node, the election, the
/// cluster and install, and the time.
pub fn value_for(
    holding: Holding<'_>,
    election: &ElectionKey,
    owner: &Owner,
    now: Timestamp,
) -> Vec<u8> {
    let value = serde_json::json!({
        "pod": holding.pod,
        "namespace": election.namespace,
        "uid": holding.uid,
        "podIP": holding.pod_ip,
        "node": holding.node,
        "election": election.name,
        "cluster": owner.cluster,
        "install": owner.install,
        "since": now.to_string(),
    });
    value.to_string().into_bytes()
}

/// Who a key value written in the operator's JSON format names as holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    /// The holding pod.
    pub pod: String,
    /// Its UID, when the value has one.
    pub uid: Option<String>,
    /// The Kubernetes cluster of the operator that wrote the value, when the value has one
    /// (earlier versions and applications may not write it).
    pub cluster: Option<String>,
    /// The install of the operator that wrote the value, when the value has one.
    pub install: Option<String>,
}

/// Reads `pod` (and `uid` and `cluster`, when present) from a key value written in the
/// operator's JSON format, `{"pod": ..., "uid": ..., "cluster": ..., ...}`.
pub fn holder_from_value(value: &[u8]) -> Option<KeyHolder> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    let text = |field: &str| v.get(field).and_then(|u| u.as_str()).map(str::to_owned);
    Some(KeyHolder {
        pod: v.get("pod")?.as_str()?.to_owned(),
        uid: text("uid"),
        cluster: text("cluster"),
        install: text("install"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_value_names_its_holder_and_this_install() {
        let election = ElectionKey {
            namespace: "shop".into(),
            name: "web".into(),
        };
        let owner = Owner::new("blue", "ops.ce");
        let holding = Holding {
            pod: "web-0",
            uid: Some("u-0"),
            pod_ip: Some("10.0.0.7"),
            node: None,
        };
        let value = value_for(holding, &election, &owner, Timestamp::UNIX_EPOCH);
        assert_eq!(
            holder_from_value(&value),
            Some(KeyHolder {
                pod: "web-0".into(),
                uid: Some("u-0".into()),
                cluster: Some("blue".into()),
                install: Some("ops.ce".into()),
            })
        );
        assert_eq!(holder_from_value(b"web-0"), None);
    }
}
