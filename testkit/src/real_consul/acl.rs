//! Legacy ACL tokens (`/v1/acl/create`, `/v1/acl/destroy`), the ACL system every Consul from
//! 1.0 to 1.10 has and the one `acl_master_token` switches on.

use super::{RealConsul, RealConsulError};

/// The rules of a legacy token, in HCL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRules(pub String);

/// The operator's minimal rules with its default key prefix: write on the keys under
/// `elector/`, write on sessions of any node (the operator creates its sessions on the node of
/// the agent it talks to, and lists and renews them).
pub const OPERATOR_RULES: &str = r#"key "elector/" { policy = "write" }
session "" { policy = "write" }"#;

impl AclRules {
    /// The operator's minimal rules ([`OPERATOR_RULES`]).
    pub fn operator() -> Self {
        Self(OPERATOR_RULES.to_string())
    }
}

pub(super) async fn create_token(
    consul: &RealConsul,
    name: &str,
    rules: &AclRules,
) -> Result<String, RealConsulError> {
    let body = serde_json::json!({"Name": name, "Type": "client", "Rules": rules.0});
    let reply = acl_put(consul, "/v1/acl/create", Some(body)).await?;
    let json: serde_json::Value =
        serde_json::from_str(&reply).map_err(|e| RealConsulError::Http {
            what: "acl create".into(),
            detail: format!("{e}: {reply}"),
        })?;
    json["ID"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| RealConsulError::Http {
            what: "acl create".into(),
            detail: format!("no ID in {reply}"),
        })
}

pub(super) async fn destroy_token(consul: &RealConsul, id: &str) -> Result<(), RealConsulError> {
    acl_put(consul, &format!("/v1/acl/destroy/{id}"), None)
        .await
        .map(drop)
}

async fn acl_put(
    consul: &RealConsul,
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
        .put(format!("{}{path}", consul.members[0].direct_url()))
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
