//! Clients that act as a ServiceAccount, to prove that something works with exactly the RBAC
//! permissions granted to it.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::TestCluster;

/// How long the serviceaccount-token controller gets to make the token Secret.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(60);
/// Type of the Secrets made by the serviceaccount-token controller.
const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming the ServiceAccount of such a Secret.
const ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

impl TestCluster {
    /// Creates ServiceAccount `name` in `namespace` (if missing), waits for its token Secret
    /// (created by the real serviceaccount-token controller), returns a client using that
    /// token.
    ///
    /// # Panics
    /// When the cluster runs without the controller-manager, or when no token appears within a
    /// minute.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Client {
        assert!(
            self.controller_manager,
            "testkit: service_account_client needs the controller-manager (it makes the tokens)"
        );
        let admin = self.client().await;
        let token = match service_account_token(&admin, namespace, name).await {
            Ok(token) => token,
            Err(error) => {
                panic!("testkit: no token for ServiceAccount {namespace}/{name}: {error}")
            }
        };
        self.client_with_token(&token).await
    }
}

/// Ensures the ServiceAccount exists and returns the token of its first token Secret.
async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<String, String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => return Err(format!("cannot create the ServiceAccount: {error}")),
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let tokens = watcher(
        secrets,
        watcher::Config::default().fields(&format!("type={TOKEN_SECRET_TYPE}")),
    )
    .applied_objects()
    .map_err(|e| format!("watching token Secrets: {e}"))
    .try_filter_map(|secret| async move { Ok(token_of(&secret, name)) })
    .boxed();
    match tokio::time::timeout(TOKEN_TIMEOUT, tokens.into_future()).await {
        Ok((Some(token), _)) => token,
        Ok((None, _)) => Err("the Secret watch ended".into()),
        Err(_) => Err(format!("no token Secret within {TOKEN_TIMEOUT:?}")),
    }
}

/// The token in `secret` if it belongs to ServiceAccount `account`.
fn token_of(secret: &Secret, account: &str) -> Option<String> {
    if secret
        .annotations()
        .get(ACCOUNT_ANNOTATION)
        .map(String::as_str)
        != Some(account)
    {
        return None;
    }
    let token = secret.data.as_ref()?.get("token")?;
    String::from_utf8(token.0.clone())
        .ok()
        .filter(|token| !token.is_empty())
}
