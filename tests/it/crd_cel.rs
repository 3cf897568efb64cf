//! Every CEL rule (`x-kubernetes-validations`) of the `LeaderElection` CRD, evaluated locally
//! with kube's `cel` feature (kube-cel), because the 1.20 test cluster does not enforce CEL:
//! for each rule a valid object passes and a violating object fails with the rule's message.
//! Then the Rust validation (`crd::validate`) is checked to say the same things as CEL on the
//! same samples, so clusters without CEL get the same answers.

use crate::common;

use std::collections::BTreeSet;

use consul_elector::crd::rules::{self, CelRule};
use consul_elector::crd::{LeaderElection, LeaderElectionSpec, validate};
use kube::core::cel::{ErrorKind, Validator, apply_defaults};
use serde_json::{Value, json};

use common::crd::schema;
use common::spec::{minimal_spec, object, spec_with};

/// The messages of the CEL rules `spec` breaks. Fails the test on anything but a rule that
/// evaluated to false (a compilation or evaluation error would hide a broken rule).
fn cel_messages(schema: &Value, spec: Value) -> BTreeSet<String> {
    match Validator::new().validate(schema, &object(spec), None) {
        Ok(()) => BTreeSet::new(),
        Err(errors) => errors
            .iter()
            .map(|error| {
                assert_eq!(
                    error.kind,
                    ErrorKind::ValidationFailure,
                    "rule {:?} did not evaluate: {}",
                    error.rule,
                    error.message
                );
                error.message.clone()
            })
            .collect(),
    }
}

/// What `validate` says about `spec`, messages only.
fn rust_messages(spec: Value) -> BTreeSet<String> {
    let election: LeaderElection =
        serde_json::from_value(object(spec)).expect("the sample deserializes");
    match validate(&election) {
        Ok(_) => BTreeSet::new(),
        Err(problems) => problems.into_iter().map(|p| p.message).collect(),
    }
}

/// One rule, a spec that keeps it and specs that break it (and nothing else).
struct Case {
    rule: CelRule,
    valid: Vec<Value>,
    invalid: Vec<Value>,
}

fn case(rule: CelRule, pointer: &str, valid: &[Value], invalid: &[Value]) -> Case {
    Case {
        rule,
        valid: valid
            .iter()
            .map(|v| spec_with(pointer, v.clone()))
            .collect(),
        invalid: invalid
            .iter()
            .map(|v| spec_with(pointer, v.clone()))
            .collect(),
    }
}

fn cases() -> Vec<Case> {
    let requirement = |operator: &str, values: Value| json!([{"key": "tier", "operator": operator, "values": values}]);
    vec![
        Case {
            rule: rules::SELECTOR_NOT_EMPTY,
            valid: vec![
                minimal_spec(),
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}),
            ],
            invalid: vec![
                json!({"selector": {}}),
                json!({"selector": {"matchLabels": {}}}),
                json!({"selector": {"matchExpressions": []}}),
            ],
        },
        case(
            rules::REQUIREMENT_VALUES,
            "/selector/matchExpressions",
            &[
                requirement("In", json!(["a"])),
                requirement("NotIn", json!(["a", "b"])),
                requirement("Exists", json!([])),
                json!([{"key": "tier", "operator": "DoesNotExist"}]),
            ],
            &[
                requirement("In", json!([])),
                json!([{"key": "tier", "operator": "NotIn"}]),
                requirement("Exists", json!(["a"])),
                requirement("DoesNotExist", json!([""])),
            ],
        ),
        case(
            rules::LABEL_KEY,
            "/labels/key",
            &[
                json!("role"),
                json!("elector.dev/role"),
                json!(format!("{}.io/{}", "a".repeat(250), "b".repeat(63))),
            ],
            &[
                json!("/role"),
                json!("role/"),
                json!("Elector.dev/role"),
                json!("a/b/c"),
                json!("bad key"),
                json!("-role"),
                json!("b".repeat(64)),
                json!(format!("{}.io/role", "a".repeat(251))),
            ],
        ),
        case(
            rules::LABEL_KEY,
            "/selector/matchExpressions",
            &[json!([{"key": "example.com/tier", "operator": "Exists"}])],
            &[json!([{"key": "tier*", "operator": "Exists"}])],
        ),
        case(
            rules::LABEL_VALUE,
            "/labels/leader",
            &[json!("primary"), json!("a"), json!("v1.2_3-x")],
            &[
                json!(""),
                json!("-x"),
                json!("x."),
                json!("a/b"),
                json!("x".repeat(64)),
            ],
        ),
        case(
            rules::LABEL_VALUE,
            "/labels/follower",
            &[json!("replica")],
            &[json!("with space")],
        ),
        case(
            rules::LEADER_FOLLOWER_DIFFER,
            "/labels",
            &[json!({"leader": "yes", "follower": "no"})],
            &[
                json!({"leader": "same", "follower": "same"}),
                json!({"leader": "follower"}),
            ],
        ),
        Case {
            rule: rules::LABEL_KEY_NOT_SELECTED,
            valid: vec![
                minimal_spec(),
                json!({
                    "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                    "labels": {"key": "role"},
                }),
            ],
            invalid: vec![
                json!({"selector": {"matchLabels": {"app": "web", "elector.dev/role": "leader"}}}),
                json!({
                    "selector": {"matchExpressions": [{"key": "role", "operator": "Exists"}]},
                    "labels": {"key": "role"},
                }),
            ],
        },
        case(rules::KEY_NOT_EMPTY, "/key", &[json!("k")], &[json!("")]),
        case(
            rules::KEY_NO_LEADING_SLASH,
            "/key",
            &[json!("elector/shop/web/leader")],
            &[json!("/elector/shop/web/leader")],
        ),
        case(
            rules::KEY_NO_TRAILING_SLASH,
            "/key",
            &[json!("elector/x")],
            &[json!("elector/x/")],
        ),
        case(
            rules::KEY_NO_EMPTY_SEGMENT,
            "/key",
            &[json!("elector/x")],
            &[json!("elector//x")],
        ),
        case(
            rules::KEY_NO_DOT_DOT,
            "/key",
            &[json!("a.b/.c/d.")],
            &[json!("elector/../x"), json!("a..b")],
        ),
        case(
            rules::KEY_NO_DOT_SEGMENT,
            "/key",
            &[json!("a.b/.c/d."), json!(".hidden/x")],
            &[
                json!("elector/ns/./x"),
                json!("./x"),
                json!("x/."),
                json!("."),
            ],
        ),
        case(
            rules::KEY_NO_SPACE,
            "/key",
            &[json!("a,b_c-d")],
            &[json!("elector/my key")],
        ),
        case(
            rules::KEY_CHARACTERS,
            "/key",
            &[json!("AZaz09-_.,/x")],
            &[json!("elector/*"), json!("elector\ttab"), json!("ключ")],
        ),
        case(
            rules::DURATION_SYNTAX,
            "/session/lockDelay",
            &[json!("0"), json!("0m45s"), json!("1.5s"), json!("500ms")],
            &[
                json!("15"),
                json!("-1s"),
                json!("1d"),
                json!(" 15s"),
                json!(".5s"),
                json!("1µs"),
            ],
        ),
        case(
            rules::TTL_RANGE,
            "/session/ttl",
            &[json!("10s"), json!("15s"), json!("24h"), json!("86400s")],
            &[
                json!("9.999s"),
                json!("0"),
                json!("86400.001s"),
                json!("25h"),
            ],
        ),
        case(
            rules::LOCK_DELAY_RANGE,
            "/session/lockDelay",
            &[json!("0s"), json!("60s"), json!("1m")],
            &[json!("60.001s"), json!("2m")],
        ),
        case(
            rules::FAILOVER_DELAY_RANGE,
            "/failover/delay",
            &[json!("0s"), json!("24h"), json!("1439m")],
            &[json!("24h1ns"), json!("86401s")],
        ),
    ]
}

#[test]
fn every_rule_accepts_valid_and_rejects_violating_objects() {
    let schema = schema();
    for case in cases() {
        for spec in &case.valid {
            assert_eq!(
                cel_messages(&schema, spec.clone()),
                BTreeSet::new(),
                "{spec} should pass"
            );
        }
        for spec in &case.invalid {
            assert_eq!(
                cel_messages(&schema, spec.clone()),
                BTreeSet::from([case.rule.message.to_owned()]),
                "{spec} should break exactly {:?}",
                case.rule.rule
            );
        }
    }
}

/// Every `x-kubernetes-validations` entry of `schema`, as (rule, message).
fn attached_rules(schema: &Value, found: &mut BTreeSet<(String, String)>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                for rule in rules {
                    found.insert((
                        rule["rule"].as_str().unwrap_or_default().to_owned(),
                        rule["message"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            map.values().for_each(|v| attached_rules(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| attached_rules(v, found)),
        _ => {}
    }
}

#[test]
fn the_schema_carries_exactly_the_listed_rules_and_each_is_tested() {
    let mut attached = BTreeSet::new();
    attached_rules(&schema(), &mut attached);
    let listed: BTreeSet<_> = rules::ALL_CEL_RULES
        .iter()
        .map(|r| (r.rule.to_owned(), r.message.to_owned()))
        .collect();
    assert_eq!(
        attached, listed,
        "rules::ALL_CEL_RULES is not what the schema carries"
    );
    let tested: BTreeSet<_> = cases()
        .iter()
        .map(|c| (c.rule.rule.to_owned(), c.rule.message.to_owned()))
        .collect();
    assert_eq!(tested, listed, "every rule needs a case");
}

/// The schema's `default`s (what the API server fills in) are the serde defaults (what the
/// code assumes when a field is missing), for whole and for partial sub-objects.
#[test]
fn schema_defaults_are_the_serde_defaults() {
    let schema = schema();
    for spec in [
        minimal_spec(),
        spec_with("/session", json!({"ttl": "30s"})),
        spec_with("/labels", json!({"leader": "primary"})),
        spec_with("/candidates", json!({})),
        spec_with("/failover", json!({})),
    ] {
        let defaulted = apply_defaults(&schema, &object(spec.clone()));
        let parsed: LeaderElectionSpec =
            serde_json::from_value(spec.clone()).expect("the sample deserializes");
        let from_serde = serde_json::to_value(parsed).expect("the spec serializes");
        assert_eq!(defaulted["spec"], from_serde, "defaults differ for {spec}");
    }
}

#[test]
fn the_minimal_object_passes_with_the_schema_defaults() {
    assert_eq!(cel_messages(&schema(), minimal_spec()), BTreeSet::new());
}

/// `crd::validate` answers what the CEL rules answer, on every sample of every case: each
/// CEL message is in one of its problems and each problem carries a CEL message (problems about
/// selector entries name the entry before the message).
#[test]
fn rust_validation_agrees_with_cel() {
    let schema = schema();
    for case in cases() {
        for spec in case.valid.iter().chain(&case.invalid) {
            let rust = rust_messages(spec.clone());
            let cel = cel_messages(&schema, spec.clone());
            let explained = |problem: &String| cel.iter().any(|m| problem.ends_with(m.as_str()));
            let reported = |message: &String| rust.iter().any(|p| p.ends_with(message.as_str()));
            assert!(
                rust.iter().all(explained) && cel.iter().all(reported),
                "crd::validate and CEL disagree on {spec}:\n  validate: {rust:?}\n  CEL: {cel:?}"
            );
        }
    }
}
