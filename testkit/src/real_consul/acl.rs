//! ACL tokens for tests: a policy and a token through `/v1/acl/policy` and `/v1/acl/token` on
//! Consul 1.4 and later, where the legacy API (`/v1/acl/create`) is deprecated and, from 1.11
//! on, gone; legacy tokens only on a server that has nothing else.

use super::RealConsul;
use super::error::RealConsulError;
use super::rules::AclRules;

impl RealConsul {
    /// Creates a token with `rules` (needs [`Options::acl`](super::Options::acl)) and returns its
    /// secret.
    pub async fn create_token(
        &self,
        name: &str,
        rules: &AclRules,
    ) -> Result<String, RealConsulError> {
        create_token(self, name, rules).await
    }

    /// Deletes the token whose secret is `secret`.
    pub async fn destroy_token(&self, secret: &str) -> Result<(), RealConsulError> {
        destroy_token(self, secret).await
    }
}

/// Whether the server has the ACL system of policies and tokens.
fn has_policies(consul: &RealConsul) -> bool {
    consul.version().at_least(1, 4)
}

async fn create_token(
    consul: &RealConsul,
    name: &str,
    rules: &AclRules,
) -> Result<String, RealConsulError> {
    if !has_policies(consul) {
        let body = serde_json::json!({"Name": name, "Type": "client", "Rules": rules.legacy()});
        let reply = acl_call(consul, reqwest::Method::PUT, "/v1/acl/create", Some(body)).await?;
        return field(&reply, "ID", "acl create");
    }
    let policy = serde_json::json!({
        "Name": format!("{name}-{}", uuid::Uuid::new_v4()),
        "Rules": rules.0,
    });
    let reply = acl_call(consul, reqwest::Method::PUT, "/v1/acl/policy", Some(policy)).await?;
    let policy = field(&reply, "ID", "acl policy")?;
    let token = serde_json::json!({"Description": name, "Policies": [{"ID": policy}]});
    let reply = acl_call(consul, reqwest::Method::PUT, "/v1/acl/token", Some(token)).await?;
    field(&reply, "SecretID", "acl token")
}

/// Deletes the token whose secret is `secret`, as an admin would: by its accessor, which the
/// token's own `/v1/acl/token/self` names.
async fn destroy_token(consul: &RealConsul, secret: &str) -> Result<(), RealConsulError> {
    if !has_policies(consul) {
        let path = format!("/v1/acl/destroy/{secret}");
        return acl_call(consul, reqwest::Method::PUT, &path, None)
            .await
            .map(drop);
    }
    let reply = consul
        .get(
            &consul.members[0].direct_url(),
            "/v1/acl/token/self",
            Some(secret),
        )
        .await
        .map_err(|detail| RealConsulError::Http {
            what: "acl token self".into(),
            detail,
        })?;
    let accessor = field(&reply, "AccessorID", "acl token self")?;
    let path = format!("/v1/acl/token/{accessor}");
    acl_call(consul, reqwest::Method::DELETE, &path, None)
        .await
        .map(drop)
}

/// The string `name` of the JSON object `reply`.
fn field(reply: &str, name: &str, what: &str) -> Result<String, RealConsulError> {
    let error = |detail: String| RealConsulError::Http {
        what: what.into(),
        detail,
    };
    let json: serde_json::Value =
        serde_json::from_str(reply).map_err(|e| error(format!("{e}: {reply}")))?;
    json[name]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| error(format!("no {name} in {reply}")))
}

async fn acl_call(
    consul: &RealConsul,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<String, RealConsulError> {
    let error = |detail: String| RealConsulError::Http {
        what: path.to_string(),
        detail,
    };
    let master = consul
        .master_token()
        .ok_or_else(|| error("started without ACLs".into()))?;
    let mut request = consul
        .http
        .request(method, format!("{}{path}", consul.members[0].direct_url()))
        .header("X-Consul-Token", master);
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.map_err(|e| error(e.to_string()))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| error(e.to_string()))?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(error(format!("{status}: {text}")))
    }
}
