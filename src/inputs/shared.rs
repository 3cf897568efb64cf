//! What an election knows of a pod that elections writing other label keys share: what a
//! role patch does with its annotations is the core's answer on it
//! ([`crate::election::annotation_owner`]).

use crate::cache::views;
use crate::context::Context;
use crate::election::annotation_owner::SharedPod;
use crate::k8s::{self, Pod};

/// What election `me` knows of `pod` (as cached) as elections writing other label keys share
/// it, for a role patch under label key `key` (making it leader: `to_leader`).
pub fn shared_pod(ctx: &Context, me: &str, key: &str, pod: &Pod, to_leader: bool) -> SharedPod {
    let caches = &ctx.caches;
    let foreign_owner_leads =
        views::foreign_owner(caches, me, pod).map(|owner| views::leads(&owner, pod));
    SharedPod {
        foreign_owner_leads,
        owned_by_me: k8s::labelled_by(pod) == Some(me),
        // Only asked when it can matter (an index lookup per label of the pod).
        led_by_another: foreign_owner_leads.is_none()
            && !to_leader
            && views::led_by_another(caches, me, key, pod),
    }
}
