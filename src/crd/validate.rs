//! Turns a `LeaderElection` into the [`ElectionConfig`] the planner works with, or into the
//! list of everything wrong with its spec.
//!
//! The checks are the CRD's schema and CEL rules again, with the same messages: Kubernetes
//! before 1.25 (and the 1.20 test cluster) does not enforce CEL rules, and objects built in
//! code never met the API server. What fails here becomes a `SpecValid=False` condition and a
//! Warning event instead of an election.

use std::fmt;
use std::time::Duration;

use kube::ResourceExt;

use super::rules::{self, CelRule};
use super::spec::{
    LeaderElection, LeaderElectionSpec, PodSelector, SelectorOperator, ValueFormatSpec,
};
use super::syntax;
use crate::consul::{ConsulAddress, parse_go_duration};
use crate::election::config::{ElectionConfig, LabelConfig, SessionConfig, ValueFormat};

/// One thing wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// Where, as a JSON path such as `spec.session.ttl`.
    pub field: &'static str,
    /// What is wrong, in the words of the CRD's validation messages.
    pub message: String,
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The Consul key of an election that does not name one: `elector/<namespace>/<name>/leader`.
pub fn default_key(namespace: &str, name: &str) -> String {
    format!("elector/{namespace}/{name}/leader")
}

/// Checks `election`'s spec against every rule of the CRD and applies the defaults; returns
/// every problem found, not just the first.
pub fn validate(election: &LeaderElection) -> Result<ElectionConfig, Vec<SpecProblem>> {
    let spec = &election.spec;
    let mut problems = Problems::default();
    check_selector(&spec.selector, &mut problems);
    let key = check_key(election, &mut problems);
    check_consul(spec, &mut problems);
    let ttl = check_duration(
        "spec.session.ttl",
        &spec.session.ttl,
        rules::TTL_RANGE,
        |d| {
            d >= Duration::from_secs(rules::TTL_SECONDS.0)
                && d <= Duration::from_secs(rules::TTL_SECONDS.1)
        },
        &mut problems,
    );
    let lock_delay = check_duration(
        "spec.session.lockDelay",
        &spec.session.lock_delay,
        rules::LOCK_DELAY_RANGE,
        |d| d <= Duration::from_secs(rules::LOCK_DELAY_MAX_SECONDS),
        &mut problems,
    );
    let failover_delay = check_duration(
        "spec.failover.delay",
        &spec.failover.delay,
        rules::FAILOVER_DELAY_RANGE,
        |d| d <= Duration::from_secs(rules::FAILOVER_DELAY_MAX_SECONDS),
        &mut problems,
    );
    let failback_interval = check_duration(
        "spec.failback.minInterval",
        &spec.failback.min_interval,
        rules::FAILOVER_DELAY_RANGE,
        |d| d <= Duration::from_secs(rules::FAILOVER_DELAY_MAX_SECONDS),
        &mut problems,
    );
    if spec.switchover.drain_seconds > rules::SWITCHOVER_DRAIN_MAX_SECONDS {
        problems.add(
            "spec.switchover.drainSeconds",
            format!("must be at most {}", rules::SWITCHOVER_DRAIN_MAX_SECONDS),
        );
    }
    check_labels(spec, &mut problems);

    match (key, ttl, lock_delay, failover_delay, failback_interval) {
        (Some(key), Some(ttl), Some(lock_delay), Some(failover_delay), Some(failback_interval))
            if problems.0.is_empty() =>
        {
            Ok(ElectionConfig {
                mode: spec.mode.into(),
                key,
                session: SessionConfig {
                    ttl,
                    lock_delay,
                    behavior: spec.session.behavior.into(),
                },
                labels: LabelConfig {
                    key: spec.labels.key.clone(),
                    leader: spec.labels.leader.clone(),
                    follower: spec.labels.follower.clone(),
                },
                require_ready: spec.candidates.require_ready,
                failover_delay,
                on_consul_unavailable: spec.on_consul_unavailable.into(),
                drain: Duration::from_secs(u64::from(spec.switchover.drain_seconds)),
                failback: spec.failback.enabled.then_some(failback_interval),
                paused: spec.paused,
                value_format: match spec.observe.value_format {
                    ValueFormatSpec::Operator => ValueFormat::Operator,
                    ValueFormatSpec::Json => ValueFormat::Json {
                        field: spec.observe.pod_field.clone(),
                    },
                    ValueFormatSpec::Plain => ValueFormat::Plain,
                },
            })
        }
        _ => Err(problems.0),
    }
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<SpecProblem>);

impl Problems {
    fn add(&mut self, field: &'static str, message: impl Into<String>) {
        self.0.push(SpecProblem {
            field,
            message: message.into(),
        });
    }

    /// Reports `rule`'s message at `field` unless `holds`.
    fn check(&mut self, holds: bool, field: &'static str, rule: CelRule) {
        if !holds {
            self.add(field, rule.message);
        }
    }
}

fn check_selector(selector: &PodSelector, problems: &mut Problems) {
    let labels = &selector.match_labels;
    let expressions = &selector.match_expressions;
    problems.check(
        !labels.is_empty() || !expressions.is_empty(),
        "spec.selector",
        rules::SELECTOR_NOT_EMPTY,
    );
    if labels.len() > count(rules::MATCH_LABELS_MAX) {
        problems.add(
            "spec.selector.matchLabels",
            format!("must have at most {} entries", rules::MATCH_LABELS_MAX),
        );
    }
    for (key, value) in labels {
        if !syntax::is_label_key(key) {
            problems.add(
                "spec.selector.matchLabels",
                format!("key {key:?} {}", rules::LABEL_KEY.message),
            );
        }
        if !syntax::is_selector_value(value) {
            problems.add(
                "spec.selector.matchLabels",
                format!(
                    "value {value:?} of {key:?} {}",
                    rules::SELECTOR_VALUE_MESSAGE
                ),
            );
        }
    }
    if expressions.len() > count(rules::MATCH_EXPRESSIONS_MAX) {
        problems.add(
            "spec.selector.matchExpressions",
            format!(
                "must have at most {} requirements",
                rules::MATCH_EXPRESSIONS_MAX
            ),
        );
    }
    for requirement in expressions {
        let key = &requirement.key;
        if !syntax::is_label_key(key) {
            problems.add(
                "spec.selector.matchExpressions",
                format!("key {key:?} {}", rules::LABEL_KEY.message),
            );
        }
        let takes_values = matches!(
            requirement.operator,
            SelectorOperator::In | SelectorOperator::NotIn
        );
        if takes_values == requirement.values.is_empty() {
            problems.add(
                "spec.selector.matchExpressions",
                format!(
                    "requirement on {key:?}: {}",
                    rules::REQUIREMENT_VALUES.message
                ),
            );
        }
        if requirement.values.len() > count(rules::REQUIREMENT_VALUES_MAX) {
            problems.add(
                "spec.selector.matchExpressions",
                format!(
                    "requirement on {key:?}: must have at most {} values",
                    rules::REQUIREMENT_VALUES_MAX
                ),
            );
        }
        for value in requirement
            .values
            .iter()
            .filter(|v| !syntax::is_selector_value(v))
        {
            problems.add(
                "spec.selector.matchExpressions",
                format!(
                    "value {value:?} of requirement on {key:?} {}",
                    rules::SELECTOR_VALUE_MESSAGE
                ),
            );
        }
    }
}

/// The election's Consul key (the spec's, or the default), if valid.
fn check_key(election: &LeaderElection, problems: &mut Problems) -> Option<String> {
    const FIELD: &str = "spec.key";
    let Some(key) = &election.spec.key else {
        return match election.namespace() {
            Some(namespace) => Some(default_key(&namespace, &election.name_any())),
            None => {
                problems.add(
                    "metadata.namespace",
                    "must be set: the default key elector/<namespace>/<name>/leader needs it",
                );
                None
            }
        };
    };
    let found = problems.0.len();
    problems.check(!key.is_empty(), FIELD, rules::KEY_NOT_EMPTY);
    problems.check(!key.starts_with('/'), FIELD, rules::KEY_NO_LEADING_SLASH);
    problems.check(!key.ends_with('/'), FIELD, rules::KEY_NO_TRAILING_SLASH);
    problems.check(!key.contains("//"), FIELD, rules::KEY_NO_EMPTY_SEGMENT);
    problems.check(!key.contains(".."), FIELD, rules::KEY_NO_DOT_DOT);
    problems.check(
        !key.split('/').any(|segment| segment == "."),
        FIELD,
        rules::KEY_NO_DOT_SEGMENT,
    );
    problems.check(!key.contains(' '), FIELD, rules::KEY_NO_SPACE);
    problems.check(
        key.chars()
            .all(|c| c == ' ' || syntax::is_consul_key_character(c)),
        FIELD,
        rules::KEY_CHARACTERS,
    );
    if key.chars().count() > count(rules::CONSUL_KEY_MAX_LENGTH) {
        problems.add(
            FIELD,
            format!(
                "must be at most {} characters long",
                rules::CONSUL_KEY_MAX_LENGTH
            ),
        );
    }
    (problems.0.len() == found).then(|| key.clone())
}

fn check_consul(spec: &LeaderElectionSpec, problems: &mut Problems) {
    let Some(consul) = &spec.consul else {
        return;
    };
    if let Some(address) = &consul.address {
        let field = "spec.consul.address";
        if !syntax::is_consul_address(address)
            || address.chars().count() > count(rules::CONSUL_ADDRESS_MAX_LENGTH)
        {
            problems.add(field, rules::CONSUL_ADDRESS_MESSAGE);
        } else if let Err(error) = ConsulAddress::parse(address, false) {
            problems.add(field, error);
        }
    }
    if let Some(datacenter) = &consul.datacenter
        && !is_datacenter_name(datacenter)
    {
        problems.add("spec.consul.datacenter", rules::DATACENTER_MESSAGE);
    }
    let tenancy = [
        ("spec.consul.namespace", &consul.namespace),
        ("spec.consul.partition", &consul.partition),
    ];
    for (field, name) in tenancy {
        if let Some(name) = name
            && !(syntax::is_tenancy(name) && name.len() <= count(rules::TENANCY_MAX_LENGTH))
        {
            problems.add(field, rules::TENANCY_MESSAGE);
        }
    }
    if let Some(secret) = &consul.token_secret_ref {
        if !syntax::is_dns_subdomain(&secret.name)
            || secret.name.len() > count(rules::SECRET_NAME_MAX_LENGTH)
        {
            problems.add(
                "spec.consul.tokenSecretRef.name",
                rules::SECRET_NAME_MESSAGE,
            );
        }
        if !syntax::is_secret_key(&secret.key)
            || secret.key.len() > count(rules::SECRET_KEY_MAX_LENGTH)
        {
            problems.add("spec.consul.tokenSecretRef.key", rules::SECRET_KEY_MESSAGE);
        }
    }
}

/// Whether `name` is a datacenter name as `spec.consul.datacenter` accepts it
/// ([`rules::DATACENTER_PATTERN`], at most [`rules::DATACENTER_MAX_LENGTH`] characters).
pub fn is_datacenter_name(name: &str) -> bool {
    syntax::is_datacenter(name) && name.len() <= count(rules::DATACENTER_MAX_LENGTH)
}

/// The duration in `text` if it is well formed and `in_range` holds.
fn check_duration(
    field: &'static str,
    text: &str,
    range: CelRule,
    in_range: impl Fn(Duration) -> bool,
    problems: &mut Problems,
) -> Option<Duration> {
    if text.chars().count() > count(rules::DURATION_MAX_LENGTH) {
        problems.add(
            field,
            format!(
                "must be at most {} characters long",
                rules::DURATION_MAX_LENGTH
            ),
        );
        return None;
    }
    let parsed = syntax::is_duration(text)
        .then(|| parse_go_duration(text).ok())
        .flatten();
    let Some(duration) = parsed else {
        problems.add(field, rules::DURATION_SYNTAX.message);
        return None;
    };
    let valid = in_range(duration);
    problems.check(valid, field, range);
    valid.then_some(duration)
}

fn check_labels(spec: &LeaderElectionSpec, problems: &mut Problems) {
    let labels = &spec.labels;
    problems.check(
        syntax::is_label_key(&labels.key),
        "spec.labels.key",
        rules::LABEL_KEY,
    );
    problems.check(
        syntax::is_label_value(&labels.leader),
        "spec.labels.leader",
        rules::LABEL_VALUE,
    );
    problems.check(
        syntax::is_label_value(&labels.follower),
        "spec.labels.follower",
        rules::LABEL_VALUE,
    );
    problems.check(
        labels.leader != labels.follower,
        "spec.labels",
        rules::LEADER_FOLLOWER_DIFFER,
    );
    let selector = &spec.selector;
    problems.check(
        !selector.match_labels.contains_key(&labels.key)
            && selector
                .match_expressions
                .iter()
                .all(|requirement| requirement.key != labels.key),
        "spec",
        rules::LABEL_KEY_NOT_SELECTED,
    );
}

/// A schema limit as a length to compare with.
fn count(limit: u32) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

/// The JSON specs of the integration tests, shared with the unit tests below.
#[cfg(test)]
#[path = "../../tests/it/common/spec.rs"]
mod test_specs;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::test_specs::{minimal_spec, object, spec_with};
    use super::*;
    use crate::election::config::{Behavior, Mode, UnavailablePolicy};

    /// `web` in namespace `shop` with `spec` (serde defaults applied, as the API server would).
    fn election(spec: serde_json::Value) -> LeaderElection {
        serde_json::from_value(object(spec)).expect("a well-formed test object")
    }

    /// A minimal valid spec with `field` (a JSON pointer below `spec`) set to `value`.
    fn with(pointer: &str, value: serde_json::Value) -> LeaderElection {
        election(spec_with(pointer, value))
    }

    fn problems(election: &LeaderElection) -> Vec<(&'static str, String)> {
        match validate(election) {
            Ok(config) => panic!("expected problems, got {config:?}"),
            Err(problems) => problems.into_iter().map(|p| (p.field, p.message)).collect(),
        }
    }

    /// `election` is rejected with exactly `message` at `field`.
    #[track_caller]
    fn rejected(election: &LeaderElection, field: &str, message: &str) {
        assert_eq!(problems(election), [(field, message.to_owned())].to_vec());
    }

    #[track_caller]
    fn accepted(election: &LeaderElection) -> ElectionConfig {
        validate(election).unwrap_or_else(|problems| panic!("unexpected problems: {problems:?}"))
    }

    #[test]
    fn a_minimal_spec_gets_every_default() {
        let config = accepted(&election(minimal_spec()));
        assert_eq!(
            config,
            ElectionConfig {
                mode: Mode::Managed,
                key: "elector/shop/web/leader".into(),
                session: SessionConfig {
                    ttl: Duration::from_secs(15),
                    lock_delay: Duration::from_secs(15),
                    behavior: Behavior::Release,
                },
                labels: LabelConfig {
                    key: "elector.dev/role".into(),
                    leader: "leader".into(),
                    follower: "follower".into(),
                },
                require_ready: true,
                failover_delay: Duration::ZERO,
                on_consul_unavailable: UnavailablePolicy::Fence,
                drain: Duration::ZERO,
                failback: None,
                paused: false,
                value_format: ValueFormat::Operator,
            }
        );
    }

    #[test]
    fn every_field_is_carried_over() {
        let config = accepted(&election(json!({
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
            "mode": "Observe",
            "key": "locks/web,primary/.leader",
            "consul": {
                "address": "https://consul.consul.svc:8501",
                "datacenter": "dc1",
                "tokenSecretRef": {"name": "consul-token", "key": "token"},
            },
            "session": {"ttl": "1m30s", "lockDelay": "500ms", "behavior": "Delete"},
            "labels": {"key": "example.com/leader", "leader": "yes", "follower": "no"},
            "candidates": {"requireReady": false},
            "failover": {"delay": "1.5m"},
            "onConsulUnavailable": "KeepLeader",
        })));
        assert_eq!(config.mode, Mode::Observe);
        assert_eq!(config.key, "locks/web,primary/.leader");
        assert_eq!(
            config.session,
            SessionConfig {
                ttl: Duration::from_secs(90),
                lock_delay: Duration::from_millis(500),
                behavior: Behavior::Delete,
            }
        );
        assert_eq!(config.labels.key, "example.com/leader");
        assert_eq!(
            (
                config.labels.leader.as_str(),
                config.labels.follower.as_str()
            ),
            ("yes", "no")
        );
        assert!(!config.require_ready);
        assert_eq!(config.failover_delay, Duration::from_secs(90));
        assert_eq!(config.on_consul_unavailable, UnavailablePolicy::KeepLeader);
    }

    #[test]
    fn ttl_bounds_are_consuls() {
        for good in ["10s", "86400s", "24h", "1m", "10.5s", "0.5h"] {
            accepted(&with("/session/ttl", json!(good)));
        }
        for bad in [
            "9.999s",
            "9s",
            "0",
            "86400.001s",
            "24h0m0.000000001s",
            "25h",
        ] {
            rejected(
                &with("/session/ttl", json!(bad)),
                "spec.session.ttl",
                rules::TTL_RANGE.message,
            );
        }
    }

    #[test]
    fn lock_delay_and_failover_delay_bounds() {
        for good in ["0", "0s", "60s", "1m", "999ms", "1ns"] {
            accepted(&with("/session/lockDelay", json!(good)));
        }
        for bad in ["60.001s", "61s", "1h"] {
            rejected(
                &with("/session/lockDelay", json!(bad)),
                "spec.session.lockDelay",
                rules::LOCK_DELAY_RANGE.message,
            );
        }
        for good in ["0s", "24h", "1439m", "86400s"] {
            accepted(&with("/failover/delay", json!(good)));
        }
        for bad in ["24h1ns", "86401s"] {
            rejected(
                &with("/failover/delay", json!(bad)),
                "spec.failover.delay",
                rules::FAILOVER_DELAY_RANGE.message,
            );
        }
    }

    #[test]
    fn malformed_durations_get_the_syntax_message() {
        for bad in [
            "", "15", "15 s", " 15s", "-15s", "+15s", "1d", "15S", ".5s", "1.s", "1µs",
        ] {
            rejected(
                &with("/session/ttl", json!(bad)),
                "spec.session.ttl",
                rules::DURATION_SYNTAX.message,
            );
        }
        rejected(
            &with("/failover/delay", json!("1".repeat(31) + "ns")),
            "spec.failover.delay",
            "must be at most 32 characters long",
        );
        // Syntactically fine but beyond what a duration can hold.
        rejected(
            &with("/failover/delay", json!("9".repeat(30) + "h")),
            "spec.failover.delay",
            rules::DURATION_SYNTAX.message,
        );
    }

    #[test]
    fn key_rules_each_have_their_message() {
        for good in [
            "a",
            "elector/shop/web/leader",
            "a.b/c_d/e-f,g",
            ".hidden/x",
            "a/.b./c",
            "x.",
        ] {
            accepted(&with("/key", json!(good)));
        }
        let cases: [(&str, &[CelRule]); 11] = [
            ("", &[rules::KEY_NOT_EMPTY]),
            ("/elector/x", &[rules::KEY_NO_LEADING_SLASH]),
            ("elector/x/", &[rules::KEY_NO_TRAILING_SLASH]),
            ("elector//x", &[rules::KEY_NO_EMPTY_SEGMENT]),
            ("elector/../x", &[rules::KEY_NO_DOT_DOT]),
            ("a..b", &[rules::KEY_NO_DOT_DOT]),
            ("elector/./x", &[rules::KEY_NO_DOT_SEGMENT]),
            (".", &[rules::KEY_NO_DOT_SEGMENT]),
            ("elector/my key", &[rules::KEY_NO_SPACE]),
            ("elector/*", &[rules::KEY_CHARACTERS]),
            (
                "/",
                &[rules::KEY_NO_LEADING_SLASH, rules::KEY_NO_TRAILING_SLASH],
            ),
        ];
        for (key, expected) in cases {
            let expected: Vec<_> = expected
                .iter()
                .map(|r| ("spec.key", r.message.to_owned()))
                .collect();
            assert_eq!(problems(&with("/key", json!(key))), expected, "key {key:?}");
        }
        rejected(
            &with("/key", json!("k".repeat(513))),
            "spec.key",
            "must be at most 512 characters long",
        );
        accepted(&with("/key", json!("k".repeat(512))));
    }

    /// Consul's HTTP server cleans `.` and `..` segments out of the request path (and the
    /// client refuses such keys), so a key with one could never be used: refused up front.
    #[test]
    fn dot_segments_are_refused() {
        for key in ["elector/ns/./x", "./x", "x/.", "."] {
            rejected(
                &with("/key", json!(key)),
                "spec.key",
                rules::KEY_NO_DOT_SEGMENT.message,
            );
        }
        rejected(
            &with("/key", json!("elector/ns/../other/leader")),
            "spec.key",
            rules::KEY_NO_DOT_DOT.message,
        );
    }

    #[test]
    fn the_default_key_needs_a_namespace() {
        let mut election = election(minimal_spec());
        election.metadata.namespace = None;
        assert_eq!(problems(&election)[0].0, "metadata.namespace");
        assert_eq!(default_key("ns", "name"), "elector/ns/name/leader");
    }

    #[test]
    fn label_rules() {
        rejected(
            &with("/labels/key", json!("role/")),
            "spec.labels.key",
            rules::LABEL_KEY.message,
        );
        rejected(
            &with("/labels/key", json!("Bad.Prefix/role")),
            "spec.labels.key",
            rules::LABEL_KEY.message,
        );
        rejected(
            &with("/labels/leader", json!("")),
            "spec.labels.leader",
            rules::LABEL_VALUE.message,
        );
        rejected(
            &with("/labels/follower", json!("-x")),
            "spec.labels.follower",
            rules::LABEL_VALUE.message,
        );
        rejected(
            &with("/labels/leader", json!("follower")),
            "spec.labels",
            rules::LEADER_FOLLOWER_DIFFER.message,
        );
        accepted(&with("/labels/key", json!("role")));
        accepted(&with("/labels/leader", json!("primary")));
    }

    #[test]
    fn the_label_key_must_not_be_selected_on() {
        let by_labels = election(json!({
            "selector": {"matchLabels": {"app": "web", "elector.dev/role": "leader"}},
        }));
        rejected(&by_labels, "spec", rules::LABEL_KEY_NOT_SELECTED.message);
        let by_expression = election(json!({
            "selector": {"matchExpressions": [{"key": "role", "operator": "Exists"}]},
            "labels": {"key": "role"},
        }));
        rejected(
            &by_expression,
            "spec",
            rules::LABEL_KEY_NOT_SELECTED.message,
        );
    }

    #[test]
    fn selector_rules() {
        rejected(
            &election(json!({"selector": {}})),
            "spec.selector",
            rules::SELECTOR_NOT_EMPTY.message,
        );
        rejected(
            &election(json!({"selector": {"matchLabels": {}, "matchExpressions": []}})),
            "spec.selector",
            rules::SELECTOR_NOT_EMPTY.message,
        );
        rejected(
            &election(json!({"selector": {"matchLabels": {"bad key": "x"}}})),
            "spec.selector.matchLabels",
            &format!("key \"bad key\" {}", rules::LABEL_KEY.message),
        );
        rejected(
            &election(json!({"selector": {"matchLabels": {"app": "-web"}}})),
            "spec.selector.matchLabels",
            &format!(
                "value \"-web\" of \"app\" {}",
                rules::SELECTOR_VALUE_MESSAGE
            ),
        );
        accepted(&election(json!({"selector": {"matchLabels": {"app": ""}}})));
        for (operator, values) in [
            ("In", json!([])),
            ("NotIn", json!([])),
            ("Exists", json!(["x"])),
            ("DoesNotExist", json!(["x"])),
        ] {
            rejected(
                &election(
                    json!({"selector": {"matchExpressions": [{"key": "app", "operator": operator, "values": values}]}}),
                ),
                "spec.selector.matchExpressions",
                &format!(
                    "requirement on \"app\": {}",
                    rules::REQUIREMENT_VALUES.message
                ),
            );
        }
        let many: serde_json::Map<_, _> = (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
        rejected(
            &election(json!({"selector": {"matchLabels": many}})),
            "spec.selector.matchLabels",
            "must have at most 64 entries",
        );
    }

    #[test]
    fn consul_overrides() {
        accepted(&with("/consul/address", json!("consul:8500")));
        accepted(&with("/consul/address", json!("http://[::1]:8500/")));
        for bad in [
            "https://consul/path",
            "ftp://consul",
            "user@consul:8500",
            "",
        ] {
            rejected(
                &with("/consul/address", json!(bad)),
                "spec.consul.address",
                rules::CONSUL_ADDRESS_MESSAGE,
            );
        }
        // Passes the schema's pattern, but is no address: the client's own parser says why.
        let problems = problems(&with("/consul/address", json!("consul:notaport")));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, "spec.consul.address");
        rejected(
            &with("/consul/datacenter", json!("dc 1")),
            "spec.consul.datacenter",
            rules::DATACENTER_MESSAGE,
        );
        for (field, bad) in [
            ("namespace", "team_a"),
            ("namespace", "-team"),
            ("partition", "east-"),
            ("partition", &"p".repeat(64)),
        ] {
            rejected(
                &with(&format!("/consul/{field}"), json!(bad)),
                if field == "namespace" {
                    "spec.consul.namespace"
                } else {
                    "spec.consul.partition"
                },
                rules::TENANCY_MESSAGE,
            );
        }
        let tenancy = json!({"namespace": "Team-A", "partition": "p".repeat(63)});
        assert!(validate(&with("/consul", tenancy)).is_ok());
        rejected(
            &with(
                "/consul/tokenSecretRef",
                json!({"name": "Token", "key": "token"}),
            ),
            "spec.consul.tokenSecretRef.name",
            rules::SECRET_NAME_MESSAGE,
        );
        rejected(
            &with(
                "/consul/tokenSecretRef",
                json!({"name": "token", "key": "a/b"}),
            ),
            "spec.consul.tokenSecretRef.key",
            rules::SECRET_KEY_MESSAGE,
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let election = election(json!({
            "selector": {},
            "key": "/x",
            "session": {"ttl": "5s", "lockDelay": "2m"},
            "labels": {"leader": "same", "follower": "same"},
            "failover": {"delay": "soon"},
        }));
        let fields: Vec<_> = problems(&election)
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.selector",
                "spec.key",
                "spec.session.ttl",
                "spec.session.lockDelay",
                "spec.failover.delay",
                "spec.labels",
            ]
        );
    }

    #[test]
    fn problems_display_as_field_and_message() {
        let problem = SpecProblem {
            field: "spec.key",
            message: "must not contain spaces".into(),
        };
        assert_eq!(problem.to_string(), "spec.key: must not contain spaces");
    }
}
