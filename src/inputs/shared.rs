//! What an election knows of a pod that elections writing other label keys share: what a
//! role patch does with its annotations is the core's answer on it
//! ([`crate::election::annotation_owner`]).

use crate::cache::views;
use crate::context::Context;
use crate::election::annotation_owner::SharedPod;
use crate::k8s::{self, Pod};

/// What election `me` knows of `pod` (as cached) as elections writing other label keys than
/// `key` share it.
pub fn shared_pod(ctx: &Context, me: &str, key: &str, pod: &Pod) -> SharedPod {
    let caches = &ctx.caches;
    let foreign_owner_leads =
        views::foreign_owner(caches, me, pod).map(|owner| views::leads(&owner, pod));
    SharedPod {
        foreign_owner_leads,
        owned_by_me: k8s::labelled_by(pod) == Some(me),
        // Only asked when it can matter (an index lookup per label of the pod).
        led_by_another: foreign_owner_leads.is_none()
            && views::led_by_another(caches, me, key, pod),
    }
}
