//! JSON shapes of Consul's answers, with Go's field order (serde keeps declaration order).

use base64::Engine as _;
use serde::Serialize;

use super::state::{KvEntry, Session};

/// A `DirEntry` as `GET /v1/kv/...` returns it.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct DirEntryJson<'a> {
    lock_index: u64,
    key: &'a str,
    flags: u64,
    /// Standard base64 with padding; `null` when empty.
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a str>,
    create_index: u64,
    modify_index: u64,
}

impl<'a> From<&'a KvEntry> for DirEntryJson<'a> {
    fn from(e: &'a KvEntry) -> Self {
        DirEntryJson {
            lock_index: e.lock_index,
            key: &e.key,
            flags: e.flags,
            value: (!e.value.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(&e.value)),
            session: e.session.as_deref().filter(|s| !s.is_empty()),
            create_index: e.create_index,
            modify_index: e.modify_index,
        }
    }
}

/// A service-check reference inside a session.
#[derive(Serialize)]
pub(crate) struct ServiceCheckJson<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "Namespace")]
    namespace: &'a str,
}

/// A `Session` as info/list/node/renew return it.
#[derive(Serialize)]
pub(crate) struct SessionJson<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(rename = "Node")]
    node: &'a str,
    /// Integer nanoseconds.
    #[serde(rename = "LockDelay")]
    lock_delay: i64,
    #[serde(rename = "Behavior")]
    behavior: &'static str,
    #[serde(rename = "TTL")]
    ttl: &'a str,
    #[serde(rename = "NodeChecks")]
    node_checks: Option<&'a [String]>,
    #[serde(rename = "ServiceChecks")]
    service_checks: Option<Vec<ServiceCheckJson<'a>>>,
    #[serde(rename = "Checks", skip_serializing_if = "Option::is_none")]
    checks: Option<&'a [String]>,
    #[serde(rename = "CreateIndex")]
    create_index: u64,
    #[serde(rename = "ModifyIndex")]
    modify_index: u64,
}

impl<'a> From<&'a Session> for SessionJson<'a> {
    fn from(s: &'a Session) -> Self {
        SessionJson {
            id: &s.id,
            name: &s.name,
            node: &s.node,
            lock_delay: s.lock_delay_ns,
            behavior: s.behavior.as_str(),
            ttl: &s.ttl,
            node_checks: s.node_checks.as_deref(),
            service_checks: s.service_checks.as_ref().map(|checks| {
                checks
                    .iter()
                    .map(|c| ServiceCheckJson {
                        id: &c.id,
                        namespace: &c.namespace,
                    })
                    .collect()
            }),
            checks: s.checks.as_deref().filter(|c| !c.is_empty()),
            create_index: s.create_index,
            modify_index: s.modify_index,
        }
    }
}

/// Serializes compactly, or indented with four spaces plus a trailing newline (`?pretty`).
pub(crate) fn to_bytes<T: Serialize + ?Sized>(value: &T, pretty: bool) -> Vec<u8> {
    let result = if pretty {
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        value.serialize(&mut ser).map(|()| {
            out.push(b'\n');
            out
        })
    } else {
        serde_json::to_vec(value)
    };
    // Serializing these plain structs cannot fail; fall back to `null` rather than panic.
    result.unwrap_or_else(|_| b"null".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::state::{SessionBehavior, SessionSpec};

    #[test]
    fn dir_entry_shape() {
        let mut e = KvEntry {
            lock_index: 1,
            key: "k".into(),
            flags: 3304740253564472344,
            value: b"v1".to_vec(),
            session: Some("s".into()),
            create_index: 5,
            modify_index: 6,
        };
        assert_eq!(
            String::from_utf8(to_bytes(&[DirEntryJson::from(&e)], false)).unwrap(),
            r#"[{"LockIndex":1,"Key":"k","Flags":3304740253564472344,"Value":"djE=","Session":"s","CreateIndex":5,"ModifyIndex":6}]"#
        );
        e.value.clear();
        e.session = None;
        assert_eq!(
            String::from_utf8(to_bytes(&DirEntryJson::from(&e), false)).unwrap(),
            r#"{"LockIndex":1,"Key":"k","Flags":3304740253564472344,"Value":null,"CreateIndex":5,"ModifyIndex":6}"#
        );
    }

    #[test]
    fn session_shape() {
        let mut spec = SessionSpec::defaults("node1");
        spec.fixup_checks();
        let s = Session {
            id: "abc".into(),
            name: String::new(),
            node: "node1".into(),
            lock_delay_ns: 15_000_000_000,
            behavior: SessionBehavior::Release,
            ttl: String::new(),
            ttl_ns: 0,
            node_checks: spec.node_checks,
            service_checks: None,
            checks: spec.checks,
            create_index: 7,
            modify_index: 7,
            deadline: None,
        };
        assert_eq!(
            String::from_utf8(to_bytes(&SessionJson::from(&s), false)).unwrap(),
            r#"{"ID":"abc","Name":"","Node":"node1","LockDelay":15000000000,"Behavior":"release","TTL":"","NodeChecks":["serfHealth"],"ServiceChecks":null,"CreateIndex":7,"ModifyIndex":7}"#
        );
        let pretty = String::from_utf8(to_bytes(&[1, 2], true)).unwrap();
        assert_eq!(pretty, "[\n    1,\n    2\n]\n");
    }
}
