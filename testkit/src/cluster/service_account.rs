//! Clients that act as a ServiceAccount, to prove that something works with exactly the RBAC
//! permissions granted to it.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::test_cluster::TestCluster;

/// How long the serviceaccount-token controller gets to fill in the token Secret.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(60);
/// Type of the Secrets the serviceaccount-token controller fills in.
const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming the ServiceAccount of such a Secret.
const ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

impl TestCluster {
    /// Creates ServiceAccount `name` in `namespace` and a token Secret for it (if missing),
    /// waits for the real serviceaccount-token controller to fill in the token, returns a
    /// client using that token.
    ///
    /// # Panics
    /// When the cluster runs without the controller-manager, or when no token appears within a
    /// minute.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Client {
        let token = self.service_account_token(namespace, name).await;
        self.client_with_token(&token).await
    }

    /// The token of ServiceAccount `name` in `namespace`, as [`Self::service_account_client`]
    /// makes it (the ServiceAccount and its token Secret created if missing).
    ///
    /// # Panics
    /// As [`Self::service_account_client`].
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        assert!(
            self.controller_manager,
            "testkit: a ServiceAccount token needs the controller-manager (it fills them in)"
        );
        let admin = self.client().await;
        match service_account_token(&admin, namespace, name).await {
            Ok(token) => token,
            Err(error) => {
                panic!("testkit: no token for ServiceAccount {namespace}/{name}: {error}")
            }
        }
    }
}

/// Ensures the ServiceAccount and a token Secret of its own exist and returns that Secret's
/// token. The Secret is created here, not awaited from the token controller: since
/// Kubernetes 1.24 no token Secret is made for a ServiceAccount unless someone creates one,
/// and the controller fills in a created one on every version.
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
    create_if_missing(&accounts, &account, "the ServiceAccount").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_name = format!("{name}-token-testkit");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            annotations: Some([(ACCOUNT_ANNOTATION.to_string(), name.to_string())].into()),
            ..ObjectMeta::default()
        },
        type_: Some(TOKEN_SECRET_TYPE.into()),
        ..Secret::default()
    };
    create_if_missing(&secrets, &secret, "the token Secret").await?;
    let tokens = watcher(
        secrets,
        watcher::Config::default().fields(&format!("metadata.name={secret_name}")),
    )
    .applied_objects()
    .map_err(|e| format!("watching the token Secret: {e}"))
    .try_filter_map(|secret| async move { Ok(token_of(&secret, name)) })
    .boxed();
    match tokio::time::timeout(TOKEN_TIMEOUT, tokens.into_future()).await {
        Ok((Some(token), _)) => token,
        Ok((None, _)) => Err("the Secret watch ended".into()),
        Err(_) => Err(format!(
            "the token controller filled in no token of Secret {secret_name} within \
             {TOKEN_TIMEOUT:?}"
        )),
    }
}

/// Creates `object` unless it exists.
async fn create_if_missing<K>(api: &Api<K>, object: &K, what: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(error) => Err(format!("cannot create {what}: {error}")),
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
