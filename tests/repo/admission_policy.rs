//! The chart's optional ValidatingAdmissionPolicy (`admissionPolicy.enabled`), evaluated
//! locally: the 1.20 test cluster has no ValidatingAdmissionPolicy, so its CEL runs here with
//! the `cel` crate, bound the way the API server binds it (`object`, `oldObject`, `request`,
//! then `variables` in order).
//!
//! The expressions are read from `charts/consul-elector/files/pod-label-policy.yaml`, the file
//! the template renders as it is; the template's own two variables (the operator's username
//! and `admissionPolicy.extraLabelKeys`) are bound to the values they would render.
//!
//! The operator's real patches (`election::pod_patch::PodPatch::role`, applied as the JSON merge
//! patch `k8s::merge_patch` makes of it) must be allowed: becoming leader, changing leader,
//! becoming follower, leaving the election, and a custom role label key when `extraLabelKeys`
//! lists it. Anything else by the operator must
//! be denied by the validation meant for it; other users' requests are never denied.

use std::collections::HashMap;
use std::path::Path;

use cel::parser::{Expression, Parser};
use cel::{Context, Value as CelValue};
use consul_elector::crd::label_token_annotation;
use consul_elector::election::annotation_owner::Annotations;
use consul_elector::election::config::LabelConfig;
use consul_elector::election::pod_patch::{PodPatch, PodRole};
use consul_elector::k8s::merge_patch;
use serde_json::{Value, json};

const NAMESPACE: &str = "consul-elector";
const ACCOUNT: &str = "consul-elector";
const UID: &str = "6a2c1f7e-0d3b-4e43-9b1e-3f6a9a1c2d4e";

fn operator() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}")
}

/// The policy file's `variables` and `validations`, as (name, expression) and
/// (expression, message).
struct Policy {
    variables: Vec<(String, Expression)>,
    validations: Vec<(Expression, String)>,
}

fn chart_file(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn policy() -> Policy {
    let file: Value = serde_saphyr::from_str(&chart_file(
        "charts/consul-elector/files/pod-label-policy.yaml",
    ))
    .expect("the policy file parses");
    let compile = |expression: &Value| {
        let text = expression.as_str().expect("an expression string");
        // Kubernetes enables CEL's optional syntax (`a.?b`, `orValue`) from 1.29.
        Parser::new()
            .enable_optional_syntax(true)
            .parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    let variables = file["variables"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| {
            let name = v["name"].as_str().expect("variable name").to_owned();
            (name, compile(&v["expression"]))
        })
        .collect();
    let validations = file["validations"]
        .as_array()
        .expect("validations")
        .iter()
        .map(|v| {
            let message = v["message"]
                .as_str()
                .expect("every validation has a message");
            (compile(&v["expression"]), message.to_owned())
        })
        .collect();
    Policy {
        variables,
        validations,
    }
}

/// The `variables` the template defines itself, before the file's.
const TEMPLATE_VARIABLES: [&str; 2] = ["operatorUsername", "extraLabelKeys"];

#[test]
fn the_template_defines_the_variables_the_file_uses() {
    let template = chart_file("charts/consul-elector/templates/admission-policy.yaml");
    assert!(
        template.contains(r#".Files.Get "files/pod-label-policy.yaml""#),
        "the template renders the policy file"
    );
    for name in TEMPLATE_VARIABLES {
        assert!(
            template.contains(&format!("- name: {name}\n")),
            "the template defines variable {name}"
        );
    }
    let file = chart_file("charts/consul-elector/files/pod-label-policy.yaml");
    let defined: Vec<String> = policy().variables.into_iter().map(|(n, _)| n).collect();
    for used in file.split("variables.").skip(1) {
        let name: String = used
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        assert!(
            TEMPLATE_VARIABLES.contains(&name.as_str()) || defined.contains(&name),
            "variables.{name} is defined neither by the template nor by the file"
        );
    }
}

/// What the policy decides about one UPDATE.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Allowed,
    /// Denied, with the messages of the validations that failed.
    Denied(Vec<String>),
}

/// Evaluates the policy on an UPDATE of `old` to `new` by `username`, as the API server
/// would: every expression must evaluate to a bool (an error would fail the request under
/// `failurePolicy: Fail`, and here fails the test, because it means a broken expression).
fn decide(username: &str, extra_label_keys: &[&str], old: &Value, new: &Value) -> Decision {
    let policy = policy();
    let request = json!({
        "operation": "UPDATE",
        "namespace": "shop",
        "name": new["metadata"]["name"],
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "userInfo": {"username": username, "groups": ["system:serviceaccounts", "system:authenticated"]},
    });
    let mut context = Context::default();
    context.add_variable("object", new).expect("bind object");
    context
        .add_variable("oldObject", old)
        .expect("bind oldObject");
    context
        .add_variable("request", &request)
        .expect("bind request");
    let mut variables: HashMap<String, CelValue> = HashMap::new();
    variables.insert("operatorUsername".into(), operator().into());
    variables.insert(
        "extraLabelKeys".into(),
        extra_label_keys
            .iter()
            .map(|k| CelValue::from(*k))
            .collect::<Vec<_>>()
            .into(),
    );
    for (name, program) in &policy.variables {
        let mut scope = Context::default();
        scope.add_variable_from_value("object", cel::to_value(new).expect("object"));
        scope.add_variable_from_value("oldObject", cel::to_value(old).expect("oldObject"));
        scope.add_variable_from_value("request", cel::to_value(&request).expect("request"));
        scope.add_variable_from_value("variables", variables.clone());
        let value = CelValue::resolve(program, &scope)
            .unwrap_or_else(|e| panic!("variable {name} does not evaluate: {e:?}"));
        variables.insert(name.clone(), value);
    }
    context.add_variable_from_value("variables", variables);
    let denied: Vec<String> = policy
        .validations
        .iter()
        .filter_map(
            |(program, message)| match CelValue::resolve(program, &context) {
                Ok(CelValue::Bool(true)) => None,
                Ok(CelValue::Bool(false)) => Some(message.clone()),
                other => panic!("validation {message:?} did not evaluate to a bool: {other:?}"),
            },
        )
        .collect();
    if denied.is_empty() {
        Decision::Allowed
    } else {
        Decision::Denied(denied)
    }
}

/// A pod of a ReplicaSet, with the user's own labels and annotations, as the API server holds
/// it (status included).
fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c8f6-x2k9p",
            "generateName": "web-7d4b9c8f6-",
            "namespace": "shop",
            "uid": UID,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-11-21T09:58:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6"},
            "annotations": {"example.com/owner": "team-web"},
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web-7d4b9c8f6",
                "uid": "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}],
            "terminationGracePeriodSeconds": 30,
        },
        "status": {"phase": "Running", "podIP": "10.0.0.12"},
    })
}

/// RFC 7386 JSON merge patch, as the API server applies the operator's patches.
fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().expect("object");
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn patched(pod: &Value, patch: &Value) -> Value {
    let mut new = pod.clone();
    merge(&mut new, patch);
    new
}

fn labels(key: &str) -> LabelConfig {
    LabelConfig {
        key: key.into(),
        leader: "leader".into(),
        follower: "follower".into(),
    }
}

fn leader(token: u64) -> PodRole {
    PodRole::Leader {
        fencing_token: token,
        since: "2026-11-21T10:00:00Z".parse().expect("timestamp"),
    }
}

/// The pod as the operator leaves it after `role`.
fn with_role(pod: &Value, key: &str, role: PodRole) -> Value {
    let patch = PodPatch::role("web-1", UID, &labels(key), "web", role, Annotations::Write);
    patched(pod, &merge_patch(&patch))
}

fn denied_by(what: &str) -> impl Fn(&Decision) -> bool + '_ {
    move |decision| match decision {
        Decision::Denied(messages) => messages.len() == 1 && messages[0].contains(what),
        Decision::Allowed => false,
    }
}

#[test]
fn the_operators_own_patches_are_allowed() {
    let role = "elector.dev/role";
    let plain = pod();
    let leading = with_role(&plain, role, leader(7));
    let following = with_role(&plain, role, PodRole::Follower);
    let steps = [
        (
            "becomes leader (label and four annotations added)",
            &plain,
            leading.clone(),
        ),
        (
            "leader again with a new fencing token",
            &leading,
            with_role(&leading, role, leader(9)),
        ),
        (
            "leader becomes follower (annotations removed)",
            &leading,
            with_role(&leading, role, PodRole::Follower),
        ),
        (
            "follower becomes leader",
            &following,
            with_role(&following, role, leader(8)),
        ),
        (
            "leaves the election (everything removed)",
            &leading,
            with_role(&leading, role, PodRole::None),
        ),
    ];
    for (what, old, new) in steps {
        assert_ne!(old, &new, "{what}: the step changes the pod");
        assert_eq!(
            decide(&operator(), &[], old, &new),
            Decision::Allowed,
            "{what}"
        );
    }
    assert_eq!(
        decide(&operator(), &[], &leading, &leading),
        Decision::Allowed,
        "a no-op update"
    );
    // The patches touched what the test thinks they touched.
    assert_eq!(leading["metadata"]["labels"][role], "leader");
    for annotation in [
        "elector.dev/fencing-token",
        "fencing-token.elector.dev/role",
        "elector.dev/leader-since",
        "elector.dev/election",
    ] {
        assert!(
            leading["metadata"]["annotations"][annotation].is_string(),
            "{annotation}"
        );
    }
    assert_eq!(
        leading["metadata"]["annotations"]["example.com/owner"],
        "team-web"
    );
}

#[test]
fn a_custom_role_label_needs_extra_label_keys() {
    // With the token annotation beside the label, with or without a prefix.
    for key in ["app.example.com/role", "role"] {
        let old = pod();
        let new = with_role(&old, key, leader(3));
        assert_eq!(
            decide(&operator(), &[key], &old, &new),
            Decision::Allowed,
            "{key} listed in extraLabelKeys"
        );
        let decision = decide(&operator(), &[], &old, &new);
        assert!(
            matches!(&decision, Decision::Denied(messages) if messages.len() == 2
                && messages[0].contains("pod labels") && messages[1].contains("pod annotations")),
            "{key} not listed: its label and its token annotation are denied: {decision:?}"
        );
        let token_only = patched(
            &old,
            &json!({"metadata": {"annotations": {label_token_annotation(key): "3"}}}),
        );
        let decision = decide(&operator(), &[], &old, &token_only);
        assert!(
            denied_by("pod annotations")(&decision),
            "{key}'s token annotation alone, not listed: {decision:?}"
        );
    }
}

#[test]
fn everything_else_the_operator_might_do_is_denied() {
    let old = with_role(&pod(), "elector.dev/role", leader(7));
    let change = |patch: Value| patched(&old, &patch);
    let mut without_owner = old.clone();
    without_owner["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    let mut new_image = old.clone();
    new_image["spec"]["containers"][0]["image"] = json!("evil.example/miner:latest");
    let cases = [
        ("changes the image", new_image, "spec, owner references"),
        (
            "removes the owner reference",
            without_owner,
            "spec, owner references",
        ),
        (
            "adds a finalizer",
            change(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
            "spec, owner references",
        ),
        (
            "adds a toleration",
            change(json!({"spec": {"tolerations": [{"key": "x", "operator": "Exists"}]}})),
            "spec, owner references",
        ),
        (
            "adds a non-elector label",
            change(json!({"metadata": {"labels": {"team": "evil"}}})),
            "pod labels",
        ),
        (
            "changes the app label (and so which Services select the pod)",
            change(json!({"metadata": {"labels": {"app": "db"}}})),
            "pod labels",
        ),
        (
            "removes the app label",
            change(json!({"metadata": {"labels": {"app": null}}})),
            "pod labels",
        ),
        (
            "adds a non-elector annotation",
            change(json!({"metadata": {"annotations": {"example.com/x": "1"}}})),
            "pod annotations",
        ),
        (
            "removes the user's annotation",
            change(json!({"metadata": {"annotations": {"example.com/owner": null}}})),
            "pod annotations",
        ),
        (
            "adds the token annotation of a label it may not write",
            change(json!({"metadata": {"annotations": {"fencing-token.example.com/role": "9"}}})),
            "pod annotations",
        ),
        (
            "an annotation that merely starts like a token annotation",
            change(
                json!({"metadata": {"annotations": {"fencing-token.elector.dev.evil.example/x": "9"}}}),
            ),
            "pod annotations",
        ),
        (
            "a label key that merely contains elector.dev/",
            change(json!({"metadata": {"labels": {"x.elector.dev/role": "leader"}}})),
            "pod labels",
        ),
    ];
    for (what, new, reason) in cases {
        let decision = decide(&operator(), &[], &old, &new);
        assert!(
            denied_by(reason)(&decision),
            "the operator {what}: want denied by the {reason:?} validation alone, got {decision:?}"
        );
    }

    // Owner references and finalizers that exist on both sides but differ.
    let mut other_owner = old.clone();
    other_owner["metadata"]["ownerReferences"][0]["name"] = json!("web-0000000000");
    let mut no_controller = old.clone();
    other_owner["metadata"]["ownerReferences"][0]["uid"] =
        json!("11111111-2222-3333-4444-555555555555");
    no_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    let held = patched(
        &old,
        &json!({"metadata": {"finalizers": ["example.com/keep"]}}),
    );
    let swapped = patched(
        &held,
        &json!({"metadata": {"finalizers": ["example.com/other"]}}),
    );
    for (what, before, after) in [
        ("moves the pod to another owner", &old, other_owner),
        ("clears the owner's controller flag", &old, no_controller),
        ("replaces a finalizer", &held, swapped),
    ] {
        let decision = decide(&operator(), &[], before, &after);
        assert!(
            denied_by("spec, owner references")(&decision),
            "the operator {what}: want denied, got {decision:?}"
        );
    }
}

#[test]
fn the_policy_does_not_apply_to_other_users() {
    let old = with_role(&pod(), "elector.dev/role", leader(7));
    let mut new = patched(
        &old,
        &json!({"metadata": {"labels": {"team": "web"}, "annotations": {"example.com/x": "1"}}}),
    );
    new["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    for user in [
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:other:consul-elector",
        &format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}-other"),
        "alice@example.com",
    ] {
        assert_eq!(decide(user, &[], &old, &new), Decision::Allowed, "{user}");
    }
    // The same change by the operator is denied by all three validations.
    match decide(&operator(), &[], &old, &new) {
        Decision::Denied(messages) => assert_eq!(messages.len(), 3, "{messages:?}"),
        Decision::Allowed => panic!("the operator's change is allowed"),
    }
}

#[test]
fn pods_without_labels_or_annotations_evaluate() {
    let mut bare = pod();
    let meta = bare["metadata"].as_object_mut().expect("metadata");
    meta.remove("labels");
    meta.remove("annotations");
    meta.remove("ownerReferences");
    let leading = with_role(&bare, "elector.dev/role", leader(1));
    assert_eq!(decide(&operator(), &[], &bare, &leading), Decision::Allowed);
    assert_eq!(
        decide(
            &operator(),
            &[],
            &leading,
            &with_role(&leading, "elector.dev/role", PodRole::None)
        ),
        Decision::Allowed
    );
    let decision = decide(
        &operator(),
        &[],
        &bare,
        &patched(&bare, &json!({"metadata": {"labels": {"app": "x"}}})),
    );
    assert!(denied_by("pod labels")(&decision), "{decision:?}");
}
