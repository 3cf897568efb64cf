//! `LeaderElection` specs as JSON, for tests that build valid and invalid objects.
//!
//! Only serde_json is used here, so that the library's unit tests (`src/crd/validate.rs`)
//! include this file too (`#[path]`): one copy serves both kinds of tests.

use serde_json::{Value, json};

/// A minimal valid spec: only the required selector.
pub fn minimal_spec() -> Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

/// [`minimal_spec`] with the value at `pointer` (a JSON pointer below `spec`, such as
/// `/session/ttl`) set to `value`, creating the objects on the way.
pub fn spec_with(pointer: &str, value: Value) -> Value {
    let mut spec = minimal_spec();
    let (parent, leaf) = pointer.rsplit_once('/').expect("a pointer with a '/'");
    let mut node = &mut spec;
    for part in parent.split('/').filter(|p| !p.is_empty()) {
        node = node
            .as_object_mut()
            .expect("an object on the path")
            .entry(part)
            .or_insert_with(|| json!({}));
    }
    node.as_object_mut()
        .expect("an object at the parent")
        .insert(leaf.to_owned(), value);
    spec
}

/// The `LeaderElection` `web` in namespace `shop` around `spec`.
pub fn object(spec: Value) -> Value {
    json!({
        "apiVersion": "elector.dev/v1alpha1",
        "kind": "LeaderElection",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": spec,
    })
}
