//! The Consul client of one election: the operator's defaults with the election's own
//! address, datacenter and token (read from the referenced Secret) on top.
//!
//! This is where a namespace user's spec meets the operator's credentials. What it may do is
//! decided by [`crate::election::consul_policy`]; this module reads the Secret and builds the
//! client:
//! - an election may name only the operator's own Consul address or one the admin allowed
//!   (`--consul-allowed-addresses`); any other is refused before a connection is opened;
//! - the operator's own token goes only to the operator's own address (see
//!   [`ConsulClient::with_overrides`]);
//! - a token Secret's metadata is read first, and its data only after its opt-in was seen.

use crate::bounded_read::bounded;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use crate::Error;
use crate::consul::{ConsulAddress, ConsulClient, ConsulToken, Overrides, Tenancy};
use crate::context::Context;
use crate::crd::{LeaderElection, SECRET_ALLOWED_ELECTIONS_ANNOTATION, SpecProblem};
use crate::election::consul_policy::{OwnToken, opted_in, own_tenancy_allows, own_token_allows};
use crate::election::request::Via;

const ADDRESS_FIELD: &str = "spec.consul.address";
const SECRET_FIELD: &str = "spec.consul.tokenSecretRef";

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

/// The Consul accesses of one reconcile of an election: the spec's, which admission opens, and
/// the one the operator acted with (`status.applied`), which a withdrawal uses, opened at its
/// first Consul request. Never the operator's own instead of the second: that would send its
/// token (or release keys) where this election was never allowed to reach.
#[derive(Default)]
pub struct Accesses {
    /// The spec's client and Consul key, once admission opened it.
    spec: Option<(ConsulClient, String)>,
    /// The election as acted on and its Consul key, with its client once opened (`Some(None)`:
    /// it cannot be used).
    acted: Option<(LeaderElection, String, Option<Option<ConsulClient>>)>,
}

impl Accesses {
    /// Admission opened the spec's access, to Consul key `key`.
    pub fn opened(&mut self, client: ConsulClient, key: String) {
        self.spec = Some((client, key));
    }

    /// The spec's access, once opened.
    pub fn spec(&self) -> Option<&(ConsulClient, String)> {
        self.spec.as_ref()
    }

    /// A withdrawal read the election as the operator acted on it, with Consul key `key`.
    pub fn acted_on(&mut self, le: LeaderElection, key: String) {
        self.acted = Some((le, key, None));
    }

    /// The client and Consul key of `via`; `None` when the access the operator acted with
    /// cannot be used.
    pub async fn of(
        &mut self,
        via: Via,
        ctx: &Context,
    ) -> Result<Option<(ConsulClient, String)>, Error> {
        let unopened = || {
            Error::InvalidStatus(format!(
                "a Consul request through {via:?} before it was read"
            ))
        };
        let Via::ActedWith = via else {
            return self.spec.clone().map(Some).ok_or_else(unopened);
        };
        let (le, key, client) = self.acted.as_mut().ok_or_else(unopened)?;
        if let Some(client) = client {
            return Ok(client.clone().map(|client| (client, key.clone())));
        }
        let opened = match client_for(le, key, ctx).await {
            Ok(consul) => Some(consul),
            Err(AccessProblem::Invalid(problem)) => {
                tracing::warn!(%problem, "withdrawing without Consul: the election has no usable Consul access");
                None
            }
            Err(AccessProblem::Failed(error)) => return Err(error),
        };
        let key = key.clone();
        Ok(client.insert(opened).clone().map(|client| (client, key)))
    }
}

/// The client for `le`, whose Consul key is `key`, sharing the operator's connection limits.
pub async fn client_for(
    le: &LeaderElection,
    key: &str,
    ctx: &Context,
) -> Result<ConsulClient, AccessProblem> {
    let namespace = le.namespace().unwrap_or_default();
    let tenancy = ctx.consul.tenancy();
    let own = OwnToken {
        datacenter: ctx.consul.datacenter(),
        allowed_datacenters: ctx.consul.allowed_datacenters(),
        namespace: tenancy.namespace.as_deref(),
        partition: tenancy.partition.as_deref(),
    };
    let Some(spec) = le.spec.consul.as_ref() else {
        own_token_allows(own, &namespace, key, None).map_err(AccessProblem::Invalid)?;
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
        own_token_allows(own, &namespace, key, spec.datacenter.as_deref())
            .and_then(|()| {
                own_tenancy_allows(own, spec.namespace.as_deref(), spec.partition.as_deref())
            })
            .map_err(AccessProblem::Invalid)?;
    }
    ctx.consul
        .with_overrides(Overrides {
            address,
            datacenter: spec.datacenter.clone(),
            tenancy: Tenancy {
                namespace: spec.namespace.clone(),
                partition: spec.partition.clone(),
            },
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
    let metadata = bounded(secrets.get_metadata(name))
        .await
        .map_err(api_error)?;
    if !opted_in(metadata.annotations(), &election) {
        return Err(not_opted_in());
    }
    let secret = bounded(secrets.get(name)).await.map_err(api_error)?;
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
