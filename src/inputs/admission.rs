//! The admission inputs the caches answer: the pods whose owners a label key must not be
//! selected by, and a spec edit since the operator last acted ([`crate::election::spec_edits`]).

use std::sync::Arc;

use crate::cache::validated::Validation;
use crate::cache::views;
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::crd::applied::applied_of;
use crate::election::admission::served_elsewhere;
use crate::election::config::ElectionConfig;
use crate::election::machine::Start;
use crate::election::report::spec_problems;
use crate::election::spec_edits::{needs_withdrawal, same_access};
use crate::k8s::Pod;

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
    }
}

/// The cached pods `le` selects, by name: their owners' selectors decide which label keys the
/// election may write ([`crate::election::label_key_check`]).
pub fn selected_pods(le: &LeaderElection, ctx: &Context, namespace: &str) -> Vec<Arc<Pod>> {
    let mut selected = views::selected_pods(&ctx.caches, le, namespace);
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    selected
}

/// Whether the Consul access the spec of `le` names (address, datacenter, token Secret) is
/// the one the operator acts with (`status.applied`): then a refusal of it means the access in
/// use was withdrawn, not that a new one cannot be used yet.
pub fn access_in_use(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> bool {
    let Some(recorded) = ctx.caches.current_status(le).applied else {
        return true;
    };
    same_access(&recorded, &applied_of(le, config))
}

/// The spec's values for `le` when the status records other ones.
pub struct Edit {
    /// Whether what was done with the recorded values must be withdrawn first
    /// ([`needs_withdrawal`]).
    pub needs_withdrawal: bool,
}

/// The edit of `le`'s spec (validated as `config`) since the operator last acted on it, if
/// any. Nothing recorded yet is no edit: the reconcile's first status write records the values
/// (sparing a write per new election).
pub fn edit(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> Option<Edit> {
    let now = applied_of(le, config);
    let recorded = ctx.caches.current_status(le).applied?;
    (recorded != now).then(|| Edit {
        needs_withdrawal: needs_withdrawal(&recorded, &now),
    })
}
