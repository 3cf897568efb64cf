//! The admission inputs, read as the machine asks for them ([`read`]). The caches answer most
//! at once; two take a request and may be awaited ([`Read::Pending`], answered by
//! [`answered`]): the owners of the pods, whose selectors a label key must not be selected
//! by, and the election's Consul access, which may read a token Secret.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::Error;
use crate::cache::validated::Validation;
use crate::cache::views;
use crate::consul::ConsulClient;
use crate::consul_access::{self, AccessProblem};
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::crd::applied::applied_of;
use crate::election::admission::{Access, Input, served_elsewhere};
use crate::election::config::ElectionConfig;
use crate::election::label_key_check::{OwnedPod, check_label_key};
use crate::election::machine::Start;
use crate::election::reconcile::Found;
use crate::election::report::spec_problems;
use crate::election::spec_edits::{needs_withdrawal, same_access};

/// What a reconcile of `le` starts from: its object and spec validated as `validation`, the
/// status as this process knows it (`deleted`: it only withdraws the election).
pub fn start(le: &LeaderElection, ctx: &Context, validation: &Validation, deleted: bool) -> Start {
    let status = ctx.caches.current_status(le);
    let consul = le.spec.consul.as_ref();
    Start {
        spec: validation
            .as_ref()
            .map(|_| ())
            .map_err(|p| spec_problems(p)),
        served_elsewhere: served_elsewhere(status.served_by.as_deref(), &ctx.settings.owner),
        paused: le.spec.paused,
        token_secret: consul.is_some_and(|c| c.token_secret_ref.is_some()),
        deleted,
        released: !deleted && ctx.releasing().is_some(),
        acting: validation
            .as_ref()
            .ok()
            .map(|config| (config.mode, config.on_consul_unavailable)),
    }
}

/// An admission input as read: at hand, or a read under way.
pub enum Read<'a> {
    /// The input.
    Found(Found),
    /// A read that takes a request.
    Pending(BoxFuture<'a, Answer>),
}

/// What a read that takes a request answers.
pub enum Answer {
    /// The owners of the pods the election selects.
    Owners(Vec<OwnedPod>),
    /// The election's Consul access.
    Access(Result<ConsulClient, AccessProblem>),
}

/// Reads `input` of `le` (its spec validated as `config`).
pub fn read<'a>(
    input: Input,
    le: &'a LeaderElection,
    ctx: &'a Context,
    config: &Arc<ElectionConfig>,
) -> Result<Read<'a>, Error> {
    let namespace = le.metadata.namespace.as_deref().unwrap_or_default();
    Ok(Read::Found(match input {
        Input::Spec => {
            return Err(Error::InvalidStatus(
                "the spec's validation asked for twice".into(),
            ));
        }
        Input::LabelKey => {
            let mut selected = views::selected_pods(&ctx.caches, le, namespace);
            selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            let owners = async move {
                let owners = ctx.caches.owner_selectors.of_pods(&ctx.client, &selected);
                Answer::Owners(owners.await)
            };
            return Ok(Read::Pending(owners.boxed()));
        }
        Input::Older => Found::Older(views::conflicting_election(&ctx.caches, le, config)),
        Input::YieldingLeader => {
            Found::YieldingLeader(views::yielding_leader(&ctx.caches, le, config))
        }
        Input::Access => {
            let key = config.key.clone();
            let access =
                async move { Answer::Access(consul_access::client_for(le, &key, ctx).await) };
            return Ok(Read::Pending(access.boxed()));
        }
        Input::Applied => {
            let edit = edit(le, ctx, config);
            Found::Applied {
                edited: edit.is_some(),
                needs_withdrawal: edit.is_some_and(|e| e.needs_withdrawal),
            }
        }
    }))
}

/// The input `answer` gives `le` (its spec validated as `config`), and the Consul client a
/// usable access opened; the error of an access that could not be read.
pub fn answered(
    answer: Answer,
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
) -> Result<(Found, Option<ConsulClient>), Error> {
    Ok(match answer {
        // A label key the pods' controller selects: writing it would make the controller
        // disown the pods and create others, without end.
        Answer::Owners(owners) => (
            Found::LabelKey(check_label_key(&config.labels.key, &owners)),
            None,
        ),
        Answer::Access(Ok(client)) => (Found::Access(Access::Usable), Some(client)),
        Answer::Access(Err(AccessProblem::Invalid(problem))) => (
            Found::Access(Access::Invalid {
                spec_valid: spec_problems(&[problem]),
                in_use: access_in_use(le, ctx, config),
            }),
            None,
        ),
        Answer::Access(Err(AccessProblem::Failed(error))) => return Err(error),
    })
}

/// Whether the Consul access the spec of `le` names (address, datacenter, token Secret) is
/// the one the operator acts with (`status.applied`): then a refusal of it means the access in
/// use was withdrawn, not that a new one cannot be used yet.
fn access_in_use(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> bool {
    let Some(recorded) = ctx.caches.current_status(le).applied else {
        return true;
    };
    same_access(&recorded, &applied_of(le, config))
}

/// The spec's values for `le` when the status records other ones.
struct Edit {
    /// Whether what was done with the recorded values must be withdrawn first
    /// ([`needs_withdrawal`]).
    needs_withdrawal: bool,
}

/// The edit of `le`'s spec (validated as `config`) since the operator last acted on it, if
/// any. Nothing recorded yet is no edit: the reconcile's first status write records the values
/// (sparing a write per new election).
fn edit(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> Option<Edit> {
    let now = applied_of(le, config);
    let recorded = ctx.caches.current_status(le).applied?;
    (recorded != now).then(|| Edit {
        needs_withdrawal: needs_withdrawal(&recorded, &now),
    })
}
