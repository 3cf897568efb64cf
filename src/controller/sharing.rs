//! Pods shared by elections with different label keys: the controller's side of
//! [`crate::election::sharing`] (which election writes a pod's annotations), reading the
//! caches for what it needs, and the patch that follows its answer.
//!
//! An election finds the pods it labelled by the annotation, or by its label key when the
//! annotation names an election with another label key.

use std::sync::Arc;

use crate::k8s::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::context::Context;
use crate::crd::LeaderElection;
use crate::election::config::LabelConfig;
pub use crate::election::sharing::Annotations;
use crate::election::sharing::{SharedPod, annotations};
use crate::k8s::{self, PodRole};

/// The existing election of `pod`'s namespace, other than `me`, that owns the pod's
/// annotations.
pub fn foreign_owner(ctx: &Context, me: &str, pod: &Pod) -> Option<Arc<LeaderElection>> {
    let owner = k8s::labelled_by(pod).filter(|owner| *owner != me)?;
    let namespace = pod.namespace()?;
    ctx.elections
        .get(&ObjectRef::new(owner).within(&namespace))
        .filter(|le| le.metadata.deletion_timestamp.is_none())
}

/// Whether `election` labels `pod` leader under its own label key.
fn leads(election: &LeaderElection, pod: &Pod) -> bool {
    let labels = &election.spec.labels;
    k8s::labels_of(pod).get(&labels.key) == Some(&labels.leader)
}

/// Whether an election of the pod's namespace other than `me`, writing another label key than
/// `key` (`me`'s), labels it leader. (Under `me`'s own key the label is `me`'s: two elections
/// writing one key on one pod are in conflict, and the younger withdraws.)
pub fn led_by_another(ctx: &Context, me: &str, key: &str, pod: &Pod) -> bool {
    let Some(namespace) = pod.namespace() else {
        return false;
    };
    k8s::labels_of(pod)
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .any(|(k, v)| {
            ctx.index
                .elections_leading(&namespace, k, v)
                .iter()
                .any(|name| {
                    name != me
                        && ctx
                            .elections
                            .get(&ObjectRef::new(name).within(&namespace))
                            .is_some_and(|le| leads(&le, pod))
                })
        })
}

/// Whether `le` labelled `pod`: the annotation names it, or the pod carries its label key
/// (with its leader or follower value) while the annotation names no election using that key.
pub fn labelled_by(ctx: &Context, le: &LeaderElection, pod: &Pod) -> bool {
    let me = le.metadata.name.as_deref().unwrap_or_default();
    if k8s::labelled_by(pod) == Some(me) {
        return true;
    }
    let labels = &le.spec.labels;
    let value = k8s::labels_of(pod).get(&labels.key);
    if value != Some(&labels.leader) && value != Some(&labels.follower) {
        return false;
    }
    foreign_owner(ctx, me, pod).is_none_or(|owner| owner.spec.labels.key != labels.key)
}

/// What a patch giving `pod` the `role` in election `me` (writing label key `key`) does with
/// the annotations ([`annotations`], on what the caches say of the pod).
pub fn annotations_for(
    ctx: &Context,
    me: &str,
    key: &str,
    pod: &Pod,
    role: PodRole,
) -> Annotations {
    let foreign_owner_leads = foreign_owner(ctx, me, pod).map(|owner| leads(&owner, pod));
    let to_leader = matches!(role, PodRole::Leader { .. });
    annotations(
        SharedPod {
            foreign_owner_leads,
            owned_by_me: k8s::labelled_by(pod) == Some(me),
            // Only asked when it can matter (an index lookup per label of the pod).
            led_by_another: foreign_owner_leads.is_none()
                && !to_leader
                && led_by_another(ctx, me, key, pod),
        },
        to_leader,
    )
}

/// Gives pod `name` (incarnation `uid`) the `role` under `labels` for election `me`, treating
/// the annotations as `annotations` says; returns the pod as the API server now has it.
pub async fn set_role(
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    labels: &LabelConfig,
    me: &str,
    role: PodRole,
    annotations: Annotations,
) -> Result<Pod, kube::Error> {
    let mut patch = k8s::role_patch(uid, labels, me, role);
    if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        match annotations {
            Annotations::Write => {}
            Annotations::Keep => {
                metadata.remove("annotations");
            }
            Annotations::GiveUp => {
                metadata.insert(
                    "annotations".to_owned(),
                    json!({
                        crate::crd::FENCING_TOKEN_ANNOTATION: null,
                        crate::crd::LEADER_SINCE_ANNOTATION: null,
                        k8s::ELECTION_ANNOTATION: null,
                    }),
                );
            }
        }
    }
    let mut pod = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    pod.slim();
    Ok(pod)
}
