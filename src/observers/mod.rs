//! What the operator observes in Consul, beside the Kubernetes caches (`crate::cache`): its
//! sessions, renewed and reported when lost ([`sessions`]), and the election keys, watched
//! with blocking queries ([`locks`]). They feed the decisions of `crate::election` and
//! decide nothing themselves.

pub mod locks;
pub mod sessions;
