//! The Consul client of one election: the operator's defaults with the election's own
//! address, datacenter and token (read from the referenced Secret) on top.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use super::Context;
use crate::Error;
use crate::consul::{ConsulAddress, ConsulClient, ConsulToken, Overrides};
use crate::crd::{LeaderElection, SpecProblem};

/// Why an election has no usable Consul client.
pub enum AccessProblem {
    /// Something the user must fix (missing Secret or key, bad address): reported as
    /// `InvalidSpec`, not retried in a storm.
    Invalid(SpecProblem),
    /// A transient failure (the API server did not answer).
    Failed(Error),
}

/// The client for `le`, sharing the operator's connection limits.
pub async fn client_for(le: &LeaderElection, ctx: &Context) -> Result<ConsulClient, AccessProblem> {
    let Some(spec) = le.spec.consul.as_ref() else {
        return Ok(ctx.consul.clone());
    };
    let address = match spec.address.as_deref() {
        None => None,
        Some(raw) => Some(ConsulAddress::parse(raw, false).map_err(|e| {
            AccessProblem::Invalid(SpecProblem {
                field: "spec.consul.address",
                message: e.to_string(),
            })
        })?),
    };
    let token = match spec.token_secret_ref.as_ref() {
        None => None,
        Some(reference) => Some(read_token(le, ctx, &reference.name, &reference.key).await?),
    };
    ctx.consul
        .with_overrides(Overrides {
            address,
            datacenter: spec.datacenter.clone(),
            token,
        })
        .map_err(|e| {
            AccessProblem::Invalid(SpecProblem {
                field: "spec.consul",
                message: e.to_string(),
            })
        })
}

async fn read_token(
    le: &LeaderElection,
    ctx: &Context,
    name: &str,
    key: &str,
) -> Result<ConsulToken, AccessProblem> {
    const FIELD: &str = "spec.consul.tokenSecretRef";
    let namespace = le.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(AccessProblem::Invalid(SpecProblem {
                field: FIELD,
                message: format!("Secret {namespace}/{name} not found"),
            }));
        }
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            return Err(AccessProblem::Invalid(SpecProblem {
                field: FIELD,
                message: format!(
                    "the operator may not read Secret {namespace}/{name} (enable rbac.secretAccess in the Helm chart)"
                ),
            }));
        }
        Err(error) => return Err(AccessProblem::Failed(Error::kube("read secret")(error))),
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        });
    let token = bytes
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| ConsulToken::new(s.trim()));
    token.ok_or_else(|| {
        AccessProblem::Invalid(SpecProblem {
            field: FIELD,
            message: format!("Secret {namespace}/{name} has no usable key {key:?}"),
        })
    })
}
