//! The Consul client of one election: the operator's defaults with the election's own
//! address, datacenter and token (read from the referenced Secret) on top.
//!
//! This is where a namespace user's spec meets the operator's credentials, so it enforces the
//! security model:
//! - an election may name only the operator's own Consul address or one the admin allowed
//!   (`--consul-allowed-addresses`); any other is refused before a connection is opened;
//! - the operator's own token goes only to the operator's own address (see
//!   [`ConsulClient::with_overrides`]);
//! - a token Secret is used only if it opted in with the annotation
//!   [`SECRET_ALLOWED_ELECTIONS_ANNOTATION`] naming the election: its metadata is read first,
//!   and its data only after the opt-in was seen;
//! - with the operator's own token an election may only use keys under
//!   `elector/<its namespace>/`, so one namespace cannot take, release or read another's lock
//!   through the operator's privileges; other keys need a token of the election's own;
//! - with the operator's own token an election may only name the operator's own datacenter or
//!   one the admin allowed (`--consul-allowed-datacenters`); a token of the election's own may
//!   name any, and Consul's ACLs decide.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use super::context::Context;
use crate::Error;
use crate::consul::{ConsulAddress, ConsulClient, ConsulToken, Overrides};
use crate::crd::{LeaderElection, SECRET_ALLOWED_ELECTIONS_ANNOTATION, SpecProblem};

const ADDRESS_FIELD: &str = "spec.consul.address";
const SECRET_FIELD: &str = "spec.consul.tokenSecretRef";
const KEY_FIELD: &str = "spec.key";
const DATACENTER_FIELD: &str = "spec.consul.datacenter";

/// Why an election has no usable Consul client.
pub enum AccessProblem {
    /// Something the user must fix (missing Secret or key, bad or refused address, a Secret
    /// that did not opt in): reported as `InvalidSpec`, not retried in a storm.
    Invalid(SpecProblem),
    /// A transient failure (the API server did not answer).
    Failed(Error),
}

fn invalid(field: &'static str, message: String) -> AccessProblem {
    AccessProblem::Invalid(SpecProblem { field, message })
}

/// The client for `le`, whose Consul key is `key`, sharing the operator's connection limits.
pub async fn client_for(
    le: &LeaderElection,
    key: &str,
    ctx: &Context,
) -> Result<ConsulClient, AccessProblem> {
    let Some(spec) = le.spec.consul.as_ref() else {
        namespace_key(le, key)?;
        return Ok(ctx.consul.clone());
    };
    let address = spec
        .address
        .as_deref()
        .map(|raw| allowed_address(raw, &ctx.consul))
        .transpose()?;
    let token = match spec.token_secret_ref.as_ref() {
        None => None,
        Some(reference) => Some(read_token(le, ctx, &reference.name, &reference.key).await?),
    };
    let own_address = address.as_ref().is_none_or(|a| a == ctx.consul.address());
    if token.is_none() && own_address {
        namespace_key(le, key)?;
        operator_datacenter(spec.datacenter.as_deref(), &ctx.consul)?;
    }
    ctx.consul
        .with_overrides(Overrides {
            address,
            datacenter: spec.datacenter.clone(),
            token,
        })
        .map_err(|e| invalid("spec.consul", e.to_string()))
}

/// Parses `raw` and checks that the operator may use it.
fn allowed_address(raw: &str, consul: &ConsulClient) -> Result<ConsulAddress, AccessProblem> {
    let address = ConsulAddress::parse(raw, false).map_err(|e| invalid(ADDRESS_FIELD, e))?;
    if !consul.allows(&address) {
        return Err(invalid(
            ADDRESS_FIELD,
            format!(
                "{address} is not a Consul address this operator may use: only its own \
                 ({}) and the addresses its admin allowed (--consul-allowed-addresses, Helm \
                 value consul.allowedAddresses)",
                consul.address()
            ),
        ));
    }
    Ok(address)
}

/// Checks that the operator's own token may be sent to `requested` (`None`: the operator's
/// default datacenter).
fn operator_datacenter(
    requested: Option<&str>,
    consul: &ConsulClient,
) -> Result<(), AccessProblem> {
    let own = consul.datacenter();
    let allowed = consul.allowed_datacenters();
    match requested {
        Some(datacenter) if !datacenter_allowed(datacenter, own, allowed) => Err(invalid(
            DATACENTER_FIELD,
            format!(
                "{datacenter:?} is not a Consul datacenter this operator's own token may be \
                 used in: only its own ({}) and the datacenters its admin allowed \
                 (--consul-allowed-datacenters, Helm value consul.allowedDatacenters); name a \
                 token of your own in spec.consul.tokenSecretRef to use another",
                own.map_or_else(|| "its agent's".to_owned(), |dc| format!("{dc:?}"))
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether an election may name `datacenter` with the operator's own token: the operator's own
/// datacenter (`own`; `None` is its agent's, which has no name here) or one of `allowed`.
/// Names are compared exactly: a spelling the admin did not list is refused.
fn datacenter_allowed(datacenter: &str, own: Option<&str>, allowed: &[String]) -> bool {
    own == Some(datacenter) || allowed.iter().any(|listed| listed == datacenter)
}

/// The keys an election may use with the operator's own token: `elector/<namespace>/...`.
fn namespace_key(le: &LeaderElection, key: &str) -> Result<(), AccessProblem> {
    let prefix = namespace_prefix(&le.namespace().unwrap_or_default());
    if key.starts_with(&prefix) {
        return Ok(());
    }
    Err(invalid(
        KEY_FIELD,
        format!(
            "with the operator's own Consul token an election may only use keys under \
             {prefix}; name a token of your own in spec.consul.tokenSecretRef to use {key:?}"
        ),
    ))
}

/// The key prefix a namespace owns in the operator's Consul.
fn namespace_prefix(namespace: &str) -> String {
    format!("elector/{namespace}/")
}

/// Whether the annotation value `allowed` (comma-separated names, or `*`) names `election`.
fn secret_allows(allowed: &str, election: &str) -> bool {
    allowed
        .split(',')
        .map(str::trim)
        .any(|name| name == "*" || name == election)
}

/// Whether `secret` opted in for `election`.
fn opted_in(annotations: &std::collections::BTreeMap<String, String>, election: &str) -> bool {
    annotations
        .get(SECRET_ALLOWED_ELECTIONS_ANNOTATION)
        .is_some_and(|allowed| secret_allows(allowed, election))
}

async fn read_token(
    le: &LeaderElection,
    ctx: &Context,
    name: &str,
    key: &str,
) -> Result<ConsulToken, AccessProblem> {
    let namespace = le.namespace().unwrap_or_default();
    let election = le.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let not_found = || invalid(SECRET_FIELD, format!("Secret {namespace}/{name} not found"));
    let forbidden = || {
        invalid(
            SECRET_FIELD,
            format!(
                "the operator may not read Secret {namespace}/{name} (enable rbac.secretAccess \
                 in the Helm chart)"
            ),
        )
    };
    let not_opted_in = || {
        invalid(
            SECRET_FIELD,
            format!(
                "Secret {namespace}/{name} does not allow election {election:?} to use it: its \
                 owner must annotate it with {SECRET_ALLOWED_ELECTIONS_ANNOTATION}={election} \
                 (a comma-separated list of elections, or *)"
            ),
        )
    };
    let api_error = |error: kube::Error| match error {
        kube::Error::Api(status) if status.is_not_found() => not_found(),
        kube::Error::Api(status) if status.is_forbidden() => forbidden(),
        error => AccessProblem::Failed(Error::kube("read secret")(error)),
    };
    // Metadata only first: the data of a Secret that did not opt in never reaches us.
    let metadata = secrets.get_metadata(name).await.map_err(api_error)?;
    if !opted_in(metadata.annotations(), &election) {
        return Err(not_opted_in());
    }
    let secret = secrets.get(name).await.map_err(api_error)?;
    // The Secret may have changed between the two reads: decide on the one whose data we use.
    if !opted_in(secret.annotations(), &election) {
        return Err(not_opted_in());
    }
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
        invalid(
            SECRET_FIELD,
            format!("Secret {namespace}/{name} has no usable key {key:?}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{datacenter_allowed, namespace_prefix, secret_allows};
    use crate::crd::default_key;

    #[test]
    fn a_namespace_owns_its_default_keys_and_no_other_namespaces() {
        let prefix = namespace_prefix("shop");
        assert!(default_key("shop", "web").starts_with(&prefix));
        assert!(!default_key("shop-2", "web").starts_with(&prefix));
        assert!(!default_key("sho", "web").starts_with(&prefix));
    }

    #[test]
    fn the_operators_token_goes_to_its_own_and_the_allowed_datacenters_only() {
        let allowed = ["dc2".to_owned(), "eu-west".to_owned()];
        assert!(datacenter_allowed("dc1", Some("dc1"), &[]));
        assert!(datacenter_allowed("dc2", Some("dc1"), &allowed));
        assert!(datacenter_allowed("eu-west", None, &allowed));
        assert!(!datacenter_allowed("dc3", Some("dc1"), &allowed));
        assert!(
            !datacenter_allowed("dc1", None, &[]),
            "the agent's has no name"
        );
        assert!(
            !datacenter_allowed("DC2", Some("dc1"), &allowed),
            "exact names"
        );
        assert!(
            !datacenter_allowed("dc", Some("dc1"), &allowed),
            "no prefixes"
        );
    }

    #[test]
    fn the_annotation_names_elections_or_all() {
        assert!(secret_allows("web", "web"));
        assert!(secret_allows("api, web ,jobs", "web"));
        assert!(secret_allows("*", "web"));
        assert!(!secret_allows("", "web"));
        assert!(!secret_allows("web2,we", "web"));
        assert!(!secret_allows("web*", "web"));
    }
}
