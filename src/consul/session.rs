//! Session API: create, renew, destroy, info, list.

use std::time::Duration;

use http::{Method, StatusCode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::client::{Call, ConsulClient, api_path};
use super::error::{ConsulError, ErrorContext, Result};
use super::go_duration;
use super::query::{QueryOptions, QueryResult};
use super::transport::Lane;

/// What happens to the keys a session holds when the session is invalidated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionBehavior {
    /// The locks are released; the keys stay.
    #[default]
    Release,
    /// The keys are deleted.
    Delete,
}

/// A service health check a session is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceCheck {
    /// The check ID.
    #[serde(rename = "ID")]
    pub id: String,
    /// The namespace (Consul Enterprise); empty in CE.
    #[serde(
        rename = "Namespace",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub namespace: String,
}

/// Parameters of a new session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// Free-form name.
    pub name: String,
    /// Time to live; Consul accepts 10 s to 24 h (`None`: no TTL).
    pub ttl: Option<Duration>,
    /// Lock-delay after invalidation (0 disables; Consul caps it at 60 s when applied).
    pub lock_delay: Duration,
    /// Release or delete the held keys on invalidation.
    pub behavior: SessionBehavior,
    /// Node checks the session depends on. Empty by default, which is sent as
    /// `"NodeChecks": []` and `"Checks": []` so that Consul does not add its default
    /// `serfHealth` (Consul before 1.7 knows only `Checks`; later versions read an empty
    /// `Checks` as "no checks at all" too).
    pub node_checks: Vec<String>,
    /// Service checks the session depends on.
    pub service_checks: Vec<ServiceCheck>,
    /// Node to create the session on (`None`: the agent's node).
    pub node: Option<String>,
}

impl SessionRequest {
    /// A session named `name` with no TTL, Consul's default lock-delay of 15 s, release
    /// behavior and no health checks.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ttl: None,
            lock_delay: Duration::from_secs(15),
            behavior: SessionBehavior::Release,
            node_checks: Vec::new(),
            service_checks: Vec::new(),
            node: None,
        }
    }

    /// Sets the TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the lock-delay.
    pub fn lock_delay(mut self, lock_delay: Duration) -> Self {
        self.lock_delay = lock_delay;
        self
    }

    /// Sets the behavior.
    pub fn behavior(mut self, behavior: SessionBehavior) -> Self {
        self.behavior = behavior;
        self
    }
}

/// The JSON body of `PUT /v1/session/create`.
#[derive(Serialize)]
struct CreateBody<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(rename = "TTL", skip_serializing_if = "Option::is_none")]
    ttl: Option<String>,
    #[serde(rename = "LockDelay")]
    lock_delay: String,
    #[serde(rename = "Behavior")]
    behavior: SessionBehavior,
    #[serde(rename = "NodeChecks")]
    node_checks: &'a [String],
    /// The same list under its pre-1.7 name, which later versions still honour.
    #[serde(rename = "Checks")]
    checks: &'a [String],
    #[serde(rename = "ServiceChecks", skip_serializing_if = "<[_]>::is_empty")]
    service_checks: &'a [ServiceCheck],
    #[serde(rename = "Node", skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
}

impl<'a> From<&'a SessionRequest> for CreateBody<'a> {
    fn from(request: &'a SessionRequest) -> Self {
        Self {
            name: &request.name,
            ttl: request.ttl.map(go_duration::format),
            lock_delay: go_duration::format(request.lock_delay),
            behavior: request.behavior,
            node_checks: &request.node_checks,
            checks: &request.node_checks,
            service_checks: &request.service_checks,
            node: request.node.as_deref().filter(|node| !node.is_empty()),
        }
    }
}

#[derive(Deserialize)]
struct CreateResponse {
    #[serde(rename = "ID")]
    id: String,
}

/// A session as Consul reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// Session ID (a UUID).
    #[serde(rename = "ID")]
    pub id: String,
    /// Name.
    #[serde(rename = "Name", default)]
    pub name: String,
    /// Node the session belongs to.
    #[serde(rename = "Node", default)]
    pub node: String,
    /// Lock-delay (Consul sends nanoseconds).
    #[serde(rename = "LockDelay", default, with = "nanoseconds")]
    pub lock_delay: Duration,
    /// Behavior on invalidation.
    #[serde(rename = "Behavior", default)]
    pub behavior: SessionBehavior,
    /// TTL as a Go duration string, verbatim (`""` when unset).
    #[serde(rename = "TTL", default)]
    pub ttl: String,
    /// Node checks (`null` and `[]` both give an empty list).
    #[serde(rename = "NodeChecks", default, deserialize_with = "null_as_empty")]
    pub node_checks: Vec<String>,
    /// Service checks (`null` and `[]` both give an empty list).
    #[serde(rename = "ServiceChecks", default, deserialize_with = "null_as_empty")]
    pub service_checks: Vec<ServiceCheck>,
    /// Legacy checks (omitted by Consul when empty).
    #[serde(
        rename = "Checks",
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub checks: Vec<String>,
    /// Raft index of the creation.
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
}

impl SessionEntry {
    /// The TTL parsed (`None` when unset or unparsable).
    pub fn ttl(&self) -> Option<Duration> {
        go_duration::parse(&self.ttl)
            .ok()
            .filter(|ttl| !ttl.is_zero())
    }
}

/// Deserializes `null` as an empty list.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A [`Duration`] as integer nanoseconds.
mod nanoseconds {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_nanos)
    }
}

/// Rejects session IDs that could change the request path. Consul's IDs are UUIDs.
fn session_path(base: &str, id: &str, context: &ErrorContext) -> Result<String> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(ConsulError::InvalidRequest {
            context: context.clone(),
            detail: "a session ID consists of letters, digits and '-'".to_owned(),
        });
    }
    Ok(api_path(base, id))
}

impl ConsulClient {
    /// `PUT /v1/session/create`: creates a session and returns its ID. Not retried after an
    /// ambiguous failure (a retry could leave a second session behind until its TTL expires).
    pub async fn create_session(&self, request: &SessionRequest) -> Result<String> {
        let context = ErrorContext::new("session create", request.name.clone());
        let body = serde_json::to_vec(&CreateBody::from(request)).map_err(|error| {
            ConsulError::InvalidRequest {
                context: context.clone(),
                detail: error.to_string(),
            }
        })?;
        let call = Call::new(
            Method::PUT,
            "/v1/session/create".to_owned(),
            context.clone(),
        )
        .body(body, "application/json")
        .not_idempotent()
        .lane(Lane::Session);
        let reply = self.call(call).await?;
        Ok(reply.json::<CreateResponse>(&context)?.id)
    }

    /// `PUT /v1/session/renew/<id>`: resets the TTL and returns the session.
    /// A 404 (expired or destroyed) is [`ConsulError::SessionNotFound`].
    pub async fn renew_session(&self, id: &str) -> Result<SessionEntry> {
        let context = ErrorContext::new("session renew", id);
        let path = session_path("/v1/session/renew/", id, &context)?;
        let reply = self
            .call(
                Call::new(Method::PUT, path, context.clone())
                    .accept_not_found()
                    .lane(Lane::Session),
            )
            .await?;
        let not_found = || ConsulError::SessionNotFound {
            context: context.clone(),
        };
        if reply.status == StatusCode::NOT_FOUND {
            return Err(not_found());
        }
        reply
            .json::<Vec<SessionEntry>>(&context)?
            .into_iter()
            .next()
            .ok_or_else(not_found)
    }

    /// `PUT /v1/session/destroy/<id>`: destroys a session (succeeds for unknown sessions).
    pub async fn destroy_session(&self, id: &str) -> Result<()> {
        let context = ErrorContext::new("session destroy", id);
        let path = session_path("/v1/session/destroy/", id, &context)?;
        self.call(Call::new(Method::PUT, path, context).lane(Lane::Session))
            .await?;
        Ok(())
    }

    /// `GET /v1/session/info/<id>`: the session, or `None` when it does not exist.
    pub async fn session_info(
        &self,
        id: &str,
        options: QueryOptions,
    ) -> Result<QueryResult<Option<SessionEntry>>> {
        let context = ErrorContext::new("session info", id);
        let path = session_path("/v1/session/info/", id, &context)?;
        let reply = self
            .read(Call::new(Method::GET, path, context.clone()), options)
            .await?;
        let sessions: Option<Vec<SessionEntry>> = reply.json(&context)?;
        Ok(QueryResult {
            value: sessions.unwrap_or_default().into_iter().next(),
            meta: reply.meta,
        })
    }

    /// `GET /v1/session/list`: every session of the datacenter.
    pub async fn list_sessions(
        &self,
        options: QueryOptions,
    ) -> Result<QueryResult<Vec<SessionEntry>>> {
        let context = ErrorContext::new("session list", "");
        let call = Call::new(Method::GET, "/v1/session/list".to_owned(), context.clone());
        let reply = self.read(call, options).await?;
        let sessions: Option<Vec<SessionEntry>> = reply.json(&context)?;
        Ok(QueryResult {
            value: sessions.unwrap_or_default(),
            meta: reply.meta,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_body_has_no_node_checks_by_default() {
        let request = SessionRequest::new("consul-elector/shop/web/web-0")
            .ttl(Duration::from_secs(15))
            .lock_delay(Duration::from_millis(1500));
        let json = serde_json::to_string(&CreateBody::from(&request)).unwrap();
        assert_eq!(
            json,
            r#"{"Name":"consul-elector/shop/web/web-0","TTL":"15s","LockDelay":"1500ms","Behavior":"release","NodeChecks":[],"Checks":[]}"#
        );
        let mut request = SessionRequest::new("x")
            .behavior(SessionBehavior::Delete)
            .lock_delay(Duration::ZERO);
        request.service_checks.push(ServiceCheck {
            id: "svc".into(),
            namespace: String::new(),
        });
        request.node = Some("node1".into());
        let json = serde_json::to_string(&CreateBody::from(&request)).unwrap();
        assert_eq!(
            json,
            r#"{"Name":"x","LockDelay":"0s","Behavior":"delete","NodeChecks":[],"Checks":[],"ServiceChecks":[{"ID":"svc"}],"Node":"node1"}"#
        );
    }

    #[test]
    fn decodes_session_entries() {
        let json = r#"[{"ID":"adf4238a-882b-9ddc-4a9d-5b6758e4159e","Name":"n","Node":"node1",
            "LockDelay":15000000000,"Behavior":"release","TTL":"30s","NodeChecks":null,
            "ServiceChecks":null,"CreateIndex":7,"ModifyIndex":9,"Unknown":1}]"#;
        let entries: Vec<SessionEntry> = serde_json::from_str(json).unwrap();
        let entry = &entries[0];
        assert_eq!(entry.lock_delay, Duration::from_secs(15));
        assert_eq!(entry.ttl(), Some(Duration::from_secs(30)));
        assert!(entry.node_checks.is_empty() && entry.service_checks.is_empty());
        assert!(entry.checks.is_empty());
        assert_eq!((entry.create_index, entry.modify_index), (7, 9));

        let json = r#"{"ID":"a","NodeChecks":["serfHealth"],"ServiceChecks":[{"ID":"c","Namespace":"default"}],
            "Checks":["serfHealth"],"Behavior":"delete","TTL":""}"#;
        let entry: SessionEntry = serde_json::from_str(json).unwrap();
        assert_eq!(entry.node_checks, vec!["serfHealth"]);
        assert_eq!(entry.service_checks[0].namespace, "default");
        assert_eq!(entry.behavior, SessionBehavior::Delete);
        assert_eq!(entry.ttl(), None);
    }

    #[test]
    fn rejects_path_changing_session_ids() {
        let context = ErrorContext::new("session renew", "");
        for bad in ["", "../kv/x", "a/b", "a?b", "a b"] {
            assert!(
                session_path("/v1/session/renew/", bad, &context).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            session_path("/v1/session/renew/", "adf4238a-882b", &context).unwrap(),
            "/v1/session/renew/adf4238a-882b"
        );
    }
}
