//! The API server's audit log of writes: who (user, and the user it impersonated) wrote what,
//! with which answer, and when by the API server's clock. A test asserts "no write of the
//! deposed replica executed after the standby's first write" from it.

use std::path::Path;

use serde::Deserialize;

/// The audit policy file's name in the cluster directory.
pub(crate) const POLICY_FILE: &str = "audit-policy.yaml";
/// The audit log's name in the cluster directory.
pub(crate) const LOG_FILE: &str = "audit.log";
/// Metadata of every write, once it completed; nothing of reads.
pub(crate) const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
";

/// One write as the API server recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditWrite {
    /// The authenticated user.
    pub user: String,
    /// The user it acted as (`Impersonate-User`), if any.
    pub impersonated: Option<String>,
    /// `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The resource, with its subresource (`pods`, `leaderelections/status`).
    pub resource: String,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: Option<String>,
    /// The HTTP status of the answer.
    pub code: u16,
    /// When the answer was complete, by the API server's clock.
    pub at: jiff::Timestamp,
}

impl AuditWrite {
    /// Whether the write took effect (a 2xx answer).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Who wrote: the impersonated user when there is one, else the authenticated one.
    pub fn writer(&self) -> &str {
        self.impersonated.as_deref().unwrap_or(&self.user)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    verb: String,
    user: User,
    impersonated_user: Option<User>,
    object_ref: Option<ObjectRef>,
    response_status: Option<Status>,
    stage_timestamp: jiff::Timestamp,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    resource: Option<String>,
    subresource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

#[derive(Deserialize)]
struct Status {
    code: Option<u16>,
}

/// Every write recorded in the audit log at `path`, in order (lines that do not parse are
/// skipped: the log may end in a line still being written). No file yet is no write yet: the
/// API server creates it with its first record.
pub fn read(path: &Path) -> std::io::Result<Vec<AuditWrite>> {
    let text = match std::fs::read_to_string(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        read => read?,
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .map(|event| {
            let object = event.object_ref.unwrap_or(ObjectRef {
                resource: None,
                subresource: None,
                namespace: None,
                name: None,
            });
            let resource = match (object.resource, object.subresource) {
                (Some(r), Some(sub)) => format!("{r}/{sub}"),
                (Some(r), None) => r,
                (None, _) => String::new(),
            };
            AuditWrite {
                user: event.user.username,
                impersonated: event.impersonated_user.map(|u| u.username),
                verb: event.verb,
                resource,
                namespace: object.namespace,
                name: object.name,
                code: event.response_status.and_then(|s| s.code).unwrap_or(0),
                at: event.stage_timestamp,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_write_and_skips_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("testkit-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        std::fs::write(
            &path,
            concat!(
                r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"admin"},"impersonatedUser":{"username":"replica-a"},"objectRef":{"resource":"leaderelections","subresource":"status","namespace":"ns","name":"web"},"responseStatus":{"code":200},"stageTimestamp":"2026-11-24T21:00:00.123456Z"}"#,
                "\n",
                r#"{"kind":"Event","verb":"#
            ),
        )
        .unwrap();
        let writes = read(&path).unwrap();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].writer(), "replica-a");
        assert_eq!(writes[0].resource, "leaderelections/status");
        assert!(writes[0].succeeded());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_log_yet_is_no_write_yet() {
        let path = std::env::temp_dir().join(format!("testkit-no-audit-{}", std::process::id()));
        assert_eq!(read(&path).unwrap().len(), 0);
    }
}
