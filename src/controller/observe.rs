//! Reading the world for one election: its pods from the cache, conflicts with other
//! elections, and the mapping from a pod event to the elections it concerns.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::Context;
use crate::crd::{LeaderElection, selector_matches};
use crate::election::config::ElectionConfig;
use crate::election::conflict::{Claim, yielding_to_me, yields_to};
use crate::election::observe::PodView;
use crate::k8s;

/// The elections of the pod's namespace that select it or labelled it: the ones a change of
/// this pod can concern.
pub fn elections_of_pod(elections: &Store<LeaderElection>, pod: &Pod) -> Vec<(String, String)> {
    let Some(namespace) = pod.namespace() else {
        return Vec::new();
    };
    let labels = k8s::labels_of(pod);
    let owner = k8s::labelled_by(pod);
    elections
        .state()
        .into_iter()
        .filter(|le| le.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|le| {
            owner == le.metadata.name.as_deref()
                || labels.contains_key(&le.spec.labels.key)
                || selector_matches(&le.spec.selector, labels)
        })
        .filter_map(|le| Some((namespace.clone(), le.metadata.name.clone()?)))
        .collect()
}

/// The pods an election works on, by name: every pod of its namespace that its selector
/// matches (`true`) or that it labelled earlier and no longer matches (`false`), each in
/// the newest version known (the cache's, or this process's own later write).
pub fn pods_of(ctx: &Context, le: &LeaderElection) -> BTreeMap<String, (Arc<Pod>, bool)> {
    let namespace = le.namespace();
    let name = le.metadata.name.as_deref();
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace() == namespace)
        .filter_map(|p| {
            // Our own latest write of the pod, when the cache has not caught up with it.
            let p = ctx.freshest(p);
            let selected = selector_matches(&le.spec.selector, k8s::labels_of(&p));
            let ours = name.is_some() && super::sharing::labelled_by(ctx, le, &p);
            (selected || ours).then(|| (p.name_any(), (p, selected)))
        })
        .collect()
}

/// The planner's view of those pods.
pub fn views(pods: &BTreeMap<String, (Arc<Pod>, bool)>, config: &ElectionConfig) -> Vec<PodView> {
    pods.values()
        .filter_map(|(pod, selected)| k8s::pod_view(pod, *selected, &config.labels.key))
        .map(|mut view| {
            // A condition's lastTransitionTime has one-second resolution (metav1.Time drops
            // the fraction), so the change happened somewhere in the second after it. Count
            // from the end of that second: a leader is then never replaced before it has
            // certainly been NotReady for `failover.delay` (at worst a second later).
            view.ready_changed_at = view
                .ready_changed_at
                .and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(1)).ok());
            view
        })
        .collect()
}

/// The claims of the live elections of a namespace, each with its election.
type Claims = Vec<(Claim, Arc<LeaderElection>)>;

/// The claim of `le` (with label key `config.labels.key`) and those of the other live
/// elections of its namespace.
fn claims(ctx: &Context, le: &LeaderElection, config: &ElectionConfig) -> Option<(Claim, Claims)> {
    let namespace = le.namespace()?;
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .collect();
    let claim_of = |other: &LeaderElection, label_key: String| -> Option<Claim> {
        Some(Claim {
            name: other.metadata.name.clone()?,
            created_at: other.metadata.creation_timestamp.as_ref()?.0,
            label_key,
            pods: pods
                .iter()
                .filter(|p| selector_matches(&other.spec.selector, k8s::labels_of(p)))
                .filter_map(|p| p.metadata.uid.clone())
                .collect(),
        })
    };
    let me = claim_of(le, config.labels.key.clone())?;
    let others = ctx
        .elections
        .state()
        .into_iter()
        .filter(|o| o.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| {
            let key = crate::crd::validate(&o).ok()?.labels.key;
            Some((claim_of(&o, key)?, o))
        })
        .collect();
    Some((me, others))
}

/// The name of an older election of the same namespace that selects one of this election's
/// pods under the same label key, if any: this one then reports `Conflict` and writes nothing.
pub fn conflicting_election(
    ctx: &Context,
    le: &LeaderElection,
    config: &ElectionConfig,
) -> Option<String> {
    let (me, others) = claims(ctx, le, config)?;
    let others: Vec<Claim> = others.into_iter().map(|(c, _)| c).collect();
    yields_to(&me, &others).map(|c| c.name.clone())
}

/// A pod that a younger election, which yields to `le`, still labels leader under the same
/// label key, and that election's name: `le` waits until that election has withdrawn before
/// it acts, so that the two never have a leader label on two pods at once (a Service
/// selecting the younger's pods would reach both).
pub fn yielding_leader(
    ctx: &Context,
    le: &LeaderElection,
    config: &ElectionConfig,
) -> Option<(String, String)> {
    let (me, others) = claims(ctx, le, config)?;
    let claims: Vec<Claim> = others.iter().map(|(c, _)| c.clone()).collect();
    let yielding = yielding_to_me(&me, &claims);
    let namespace = le.namespace();
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace() == namespace)
        .find_map(|pod| {
            let value = k8s::labels_of(&pod).get(&config.labels.key);
            others
                .iter()
                .find(|(claim, election)| {
                    yielding.contains(&claim)
                        && k8s::labelled_by(&pod) == Some(claim.name.as_str())
                        && value == Some(&election.spec.labels.leader)
                })
                .map(|(claim, _)| (pod.name_any(), claim.name.clone()))
        })
}
