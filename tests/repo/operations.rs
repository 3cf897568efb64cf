//! The operations documentation and the chart's monitoring files against the binary's metrics.
//!
//! 1. `operations_doc_lists_exactly_the_registered_metrics`: every metric family the operator
//!    registers (read from the registry's own OpenMetrics encoding, as `/metrics` serves it)
//!    has a row in the metrics table of `docs/operations.md` with its type and labels, and
//!    every `consul_elector_*` name anywhere in that document is one the binary exports.
//! 2. `dashboard_queries_use_only_exported_metrics`: the Grafana dashboard's queries name only
//!    exported series.
//! 3. `prometheus_rules_are_well_formed_and_use_only_exported_metrics`: the rules file the
//!    PrometheusRule ships has the shape Prometheus loads (groups, rules, alert, expr, for,
//!    labels, annotations), its expressions name only exported series, and every alert is
//!    described in `docs/operations.md`.
//! 4. `prometheus_rules_pass_promtool`: `promtool check rules` accepts the rules file, and
//!    `promtool test rules` passes its unit tests (`charts/tests/prometheus-rules.test.yaml`:
//!    for every alert, series that must fire it and series that must not). promtool is
//!    `$ELECTOR_PROMTOOL`, else `promtool` on the PATH, else the copy `.ci/run` caches in
//!    `~/.cache/consul-elector/promtool/`; without it the test is skipped with a printed reason,
//!    except in CI (`CI=true`), where it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use consul_elector::election::invariants::Disagreement;
use consul_elector::metrics::{FencingCause, Metrics};
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PREFIX: &str = "consul_elector_";
const OPERATIONS: &str = "docs/operations.md";
const RULES: &str = "charts/consul-elector/files/prometheus-rules.yaml";
const DASHBOARD: &str = "charts/consul-elector/dashboards/consul-elector.json";
const RULE_TESTS: &str = "charts/tests/prometheus-rules.test.yaml";
/// The standard process metrics' prefix.
const PROCESS: &str = "process_";

fn root(path: &str) -> PathBuf {
    Path::new(ROOT).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// One metric family as the exposition describes it.
#[derive(Debug, Default)]
struct Family {
    /// `counter`, `gauge`, `histogram` or `info`.
    kind: String,
    /// Label names of its samples (without a histogram's `le`).
    labels: BTreeSet<String>,
}

impl Family {
    /// The sample names the exposition writes for a family `name` of this type: what PromQL
    /// can select.
    fn series(&self, name: &str) -> Vec<String> {
        match self.kind.as_str() {
            "counter" => vec![format!("{name}_total")],
            "info" => vec![format!("{name}_info")],
            "histogram" => ["", "_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{name}{suffix}"))
                .collect(),
            _ => vec![name.to_owned()],
        }
    }

    /// The name a user queries, as the operations document's table lists it.
    fn documented_name(&self, name: &str) -> String {
        match self.kind.as_str() {
            "counter" => format!("{name}_total"),
            "info" => format!("{name}_info"),
            _ => name.to_owned(),
        }
    }
}

/// The registry's OpenMetrics text after one call of every recording method
/// (prometheus-client leaves out a labelled family until it has a series).
fn exposition() -> String {
    let metrics = Metrics::new();
    metrics.reconcile_finished(Ok(()), Duration::from_millis(1));
    metrics.reconcile_finished(Err("finalizer"), Duration::from_millis(1));
    drop(metrics.count_and_measure());
    metrics.status_write_failed();
    metrics.event_suppressed();
    metrics.elected(consul_elector::election::plan_loop::Elected {
        transition: true,
        after_move: Some(Duration::from_millis(5)),
    });
    metrics.fenced(FencingCause::Unconfirmed);
    metrics.set_phase_count("elected", 1);
    metrics.set_without_leader("electing", 1);
    metrics.disagreement(Disagreement::StaleStatus);
    metrics.set_sessions(1);
    metrics.set_active(true);
    metrics.consul_observer().observe(
        "session renew",
        Err("transport"),
        Duration::from_millis(2),
        false,
    );
    metrics.encode()
}

/// Every family the operator registers, read from [`exposition`].
fn registered() -> BTreeMap<String, Family> {
    let text = exposition();
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE <name> <type>");
            families.entry(name.to_owned()).or_default().kind = kind.to_owned();
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let sample = line.split([' ', '{']).next().unwrap_or_default();
        let Some((name, _)) = families
            .iter()
            .find(|(name, family)| family.series(name).iter().any(|s| s == sample))
        else {
            panic!("sample {sample} belongs to no family in\n{text}");
        };
        let name = name.clone();
        if let Some((_, labels)) = line.split_once('{') {
            let labels = labels.split('}').next().unwrap_or_default();
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let label = pair.split('=').next().unwrap_or_default();
                if label != "le"
                    && let Some(family) = families.get_mut(&name)
                {
                    family.labels.insert(label.to_owned());
                }
            }
        }
    }
    assert!(
        families.len() >= 10
            && families
                .keys()
                .all(|n| n.starts_with(PREFIX) || n.starts_with(PROCESS)),
        "families read from the registry: {families:?}"
    );
    families
}

/// Every exported sample name, mapped to its family.
fn exported(families: &BTreeMap<String, Family>) -> BTreeMap<String, String> {
    families
        .iter()
        .flat_map(|(name, family)| {
            family
                .series(name)
                .into_iter()
                .map(move |series| (series, name.clone()))
        })
        .collect()
}

/// The identifiers of a PromQL expression (metric, function and label names, keywords),
/// skipping string literals, numbers and durations.
fn promql_identifiers(expr: &str) -> Vec<String> {
    let mut identifiers = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let quote = c;
                while let Some(inner) = chars.next() {
                    if inner == '\\' && quote != '`' {
                        chars.next();
                    } else if inner == quote {
                        break;
                    }
                }
            }
            c if c.is_ascii_digit() => {
                // A number or a duration such as 5m or 1h30m: not an identifier.
                while chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '.')
                {
                    chars.next();
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let mut word = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' || n == ':' {
                        word.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                identifiers.push(word);
            }
            _ => {}
        }
    }
    identifiers
}

/// The `consul_elector_*` names of `expr` that the binary does not export.
fn unknown_metrics(expr: &str, exported: &BTreeMap<String, String>) -> Vec<String> {
    promql_identifiers(expr)
        .into_iter()
        .filter(|word| word.starts_with(PREFIX) && !exported.contains_key(word))
        .collect()
}

#[test]
fn promql_identifiers_skip_strings_and_durations() {
    assert_eq!(
        promql_identifiers(
            r#"sum without (pod) (increase(consul_elector_a_total{kind="consul_elector_x"}[5m])) > 0.1"#
        ),
        [
            "sum",
            "without",
            "pod",
            "increase",
            "consul_elector_a_total",
            "kind"
        ]
    );
    assert_eq!(
        promql_identifiers("label_values(consul_elector_active, namespace)"),
        ["label_values", "consul_elector_active", "namespace"]
    );
}

/// The rows of the metrics table of the operations document: name -> (type, labels).
fn documented_metrics(doc: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Metrics\n"))
        .expect("docs/operations.md has a `## Metrics` section");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        assert!(cells.len() >= 4, "metrics table row with 4 columns: {line}");
        let name = cells[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_owned();
        let labels: BTreeSet<String> = cells[2]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        assert!(
            rows.insert(name.clone(), (cells[1].to_owned(), labels))
                .is_none(),
            "{name} has two rows"
        );
    }
    rows
}

#[test]
fn operations_doc_lists_exactly_the_registered_metrics() {
    let families = registered();
    let exported = exported(&families);
    let doc = read(OPERATIONS);
    let rows = documented_metrics(&doc);

    let mut problems = Vec::new();
    for (name, family) in &families {
        let documented = family.documented_name(name);
        match rows.get(&documented) {
            None => problems.push(format!(
                "{documented} ({}) is registered but has no row in the metrics table",
                family.kind
            )),
            Some((kind, labels)) => {
                if *kind != family.kind {
                    problems.push(format!(
                        "{documented}: the table says {kind}, the registry {}",
                        family.kind
                    ));
                }
                if *labels != family.labels {
                    problems.push(format!(
                        "{documented}: the table lists labels {labels:?}, the samples carry {:?}",
                        family.labels
                    ));
                }
            }
        }
    }
    let wanted: BTreeSet<String> = families
        .iter()
        .map(|(name, family)| family.documented_name(name))
        .collect();
    for row in rows.keys().filter(|row| !wanted.contains(*row)) {
        problems.push(format!(
            "the table lists {row}, which the binary does not export"
        ));
    }
    // Anywhere in the document (PromQL examples, prose): only exported names. Prose has
    // apostrophes, so this splits words rather than parsing PromQL; the bare prefix (as in
    // `grep '^consul_elector_'`) names no metric.
    let words = doc.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
    for word in words {
        if word.starts_with(PREFIX) && word != PREFIX && !exported.contains_key(word) {
            problems.push(format!("{OPERATIONS} names {word}, which is not exported"));
        }
    }
    assert!(
        problems.is_empty(),
        "{OPERATIONS} and the registry disagree:\n{}",
        problems.join("\n")
    );
}

/// Every string under a key `expr`, `query` or `definition` in the dashboard (panel targets and
/// template variables), with the place it was found.
fn dashboard_queries(value: &Value, place: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let here = format!("{place}/{key}");
                match (key.as_str(), child) {
                    ("expr" | "query" | "definition", Value::String(q)) => {
                        out.push((here, q.clone()));
                    }
                    _ => dashboard_queries(child, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                dashboard_queries(child, &format!("{place}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn dashboard_queries_use_only_exported_metrics() {
    let exported = exported(&registered());
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        assert!(
            !targets.is_empty() && targets.iter().all(|t| t["expr"].is_string()),
            "panel {} has PromQL targets",
            panel["title"]
        );
    }
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, "", &mut queries);
    let used: BTreeSet<String> = queries
        .iter()
        .flat_map(|(_, q)| promql_identifiers(q))
        .filter(|w| w.starts_with(PREFIX))
        .collect();
    assert!(used.len() >= 10, "the dashboard queries {used:?}");
    let unknown: Vec<String> = queries
        .iter()
        .flat_map(|(place, q)| {
            unknown_metrics(q, &exported)
                .into_iter()
                .map(move |m| format!("{place}: {m}"))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} queries metrics the binary does not export:\n{}",
        unknown.join("\n")
    );
    let template = read("charts/consul-elector/templates/grafana-dashboard.yaml");
    assert!(
        template.contains(r#".Files.Get "dashboards/consul-elector.json""#),
        "the ConfigMap ships {DASHBOARD}"
    );
}

/// A Prometheus duration such as 30s, 5m or 1h30m.
fn is_duration(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// A map of strings, or the problem with it.
fn string_map(value: &Value, what: &str) -> Result<BTreeMap<String, String>, String> {
    let map = value
        .as_object()
        .ok_or_else(|| format!("{what} is not a map"))?;
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(s) => Ok((k.clone(), s.to_owned())),
            None => Err(format!("{what}.{k} is not a string")),
        })
        .collect()
}

#[test]
fn prometheus_rules_are_well_formed_and_use_only_exported_metrics() {
    let exported = exported(&registered());
    let rules: Value = serde_saphyr::from_str(&read(RULES)).expect("the rules file is YAML");
    let doc = read(OPERATIONS);
    let mut problems = Vec::new();
    let top = rules.as_object().expect("a map at the top");
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        ["groups"],
        "only `groups` at the top"
    );
    let groups = rules["groups"].as_array().expect("groups is a list");
    assert!(!groups.is_empty(), "at least one group");
    let mut alerts = BTreeSet::new();
    for group in groups {
        let name = group["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            problems.push(format!("a group without a name: {group}"));
        }
        for key in group.as_object().map(|m| m.keys()).into_iter().flatten() {
            if !["name", "interval", "limit", "rules"].contains(&key.as_str()) {
                problems.push(format!("group {name}: unknown field {key}"));
            }
        }
        let Some(list) = group["rules"].as_array().filter(|l| !l.is_empty()) else {
            problems.push(format!("group {name} has no rules"));
            continue;
        };
        for rule in list {
            let alert = rule["alert"].as_str().unwrap_or_default();
            let at = format!("{name}/{alert}");
            if alert.is_empty()
                || !alert.starts_with(|c: char| c.is_ascii_uppercase())
                || !alert.chars().all(|c| c.is_ascii_alphanumeric())
            {
                problems.push(format!("{at}: `alert` must be a CamelCase name: {rule}"));
            }
            if !alerts.insert(alert.to_owned()) {
                problems.push(format!("{at}: two alerts of that name"));
            }
            for key in rule.as_object().map(|m| m.keys()).into_iter().flatten() {
                let known = [
                    "alert",
                    "expr",
                    "for",
                    "keep_firing_for",
                    "labels",
                    "annotations",
                ];
                if !known.contains(&key.as_str()) {
                    problems.push(format!("{at}: unknown field {key}"));
                }
            }
            match rule["expr"].as_str() {
                Some(expr) if !expr.trim().is_empty() => {
                    for metric in unknown_metrics(expr, &exported) {
                        problems.push(format!("{at}: expr names {metric}, which is not exported"));
                    }
                    if !promql_identifiers(expr)
                        .iter()
                        .any(|w| w.starts_with(PREFIX))
                    {
                        problems.push(format!("{at}: expr uses no operator metric"));
                    }
                }
                _ => problems.push(format!("{at}: `expr` must be a non-empty string")),
            }
            if !rule["for"].is_null() && !rule["for"].as_str().is_some_and(is_duration) {
                problems.push(format!("{at}: `for` must be a duration: {}", rule["for"]));
            }
            match string_map(&rule["labels"], "labels") {
                Ok(labels) => {
                    let severity = labels.get("severity").map(String::as_str);
                    if !matches!(severity, Some("critical" | "warning" | "info")) {
                        problems.push(format!("{at}: labels.severity is {severity:?}"));
                    }
                }
                Err(problem) => problems.push(format!("{at}: {problem}")),
            }
            match string_map(&rule["annotations"], "annotations") {
                Ok(annotations) => {
                    for key in ["summary", "description"] {
                        if annotations.get(key).is_none_or(|v| v.trim().is_empty()) {
                            problems.push(format!("{at}: annotations.{key} is missing"));
                        }
                    }
                }
                Err(problem) => problems.push(format!("{at}: {problem}")),
            }
            if !doc.contains(&format!("`{alert}`")) {
                problems.push(format!("{at}: not described in {OPERATIONS}"));
            }
        }
    }
    assert!(problems.is_empty(), "{RULES}:\n{}", problems.join("\n"));
    let template = read("charts/consul-elector/templates/prometheusrule.yaml");
    assert!(
        template.contains(r#".Files.Get "files/prometheus-rules.yaml""#),
        "the PrometheusRule ships {RULES}"
    );
}

#[test]
fn durations_are_recognised() {
    for good in ["30s", "5m", "1h30m", "100ms", "2d"] {
        assert!(is_duration(good), "{good}");
    }
    for bad in ["", "30", "s", "5 m", "1.5h", "5M"] {
        assert!(!is_duration(bad), "{bad}");
    }
}

/// promtool, if it can be found (see the module documentation).
fn promtool() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ELECTOR_PROMTOOL") {
        return Some(PathBuf::from(path));
    }
    let on_path = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Some(PathBuf::from("promtool"));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    let cached = cache.join("consul-elector/promtool/promtool");
    cached.is_file().then_some(cached)
}

#[test]
fn prometheus_rules_pass_promtool() {
    let Some(promtool) = promtool() else {
        return crate::skip_unless_ci(
            "prometheus_rules_pass_promtool",
            "promtool not found (the rules' schema is still checked by \
             prometheus_rules_are_well_formed_and_use_only_exported_metrics)",
            "`.ci/run` installs it, or set ELECTOR_PROMTOOL",
        );
    };
    for (command, file) in [("check", RULES), ("test", RULE_TESTS)] {
        let output = Command::new(&promtool)
            .args([command, "rules"])
            .arg(root(file))
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", promtool.display()));
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("{report}");
        assert!(
            output.status.success(),
            "promtool {command} rules {file} failed:\n{report}"
        );
    }
}

#[test]
fn every_alert_has_a_unit_test() {
    let tests = read(RULE_TESTS);
    let missing: Vec<String> = read(RULES)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .filter(|alert| !tests.contains(&format!("alertname: {alert}\n")))
        .map(str::to_owned)
        .collect();
    assert!(
        missing.is_empty(),
        "alerts without a test in {RULE_TESTS}: {missing:?}"
    );
}

/// The HELP text of a family quotes label values (`ok`, an operation) as the operations
/// document's row of that family lists them, so the two never name different values.
#[test]
fn help_texts_quote_only_values_the_operations_doc_lists() {
    let doc = read(OPERATIONS);
    let families = registered();
    for line in exposition().lines() {
        let Some((name, help)) = line
            .strip_prefix("# HELP ")
            .and_then(|rest| rest.split_once(' '))
        else {
            continue;
        };
        let Some(family) = families.get(name) else {
            continue;
        };
        let row_start = format!("| `{}` |", family.documented_name(name));
        let Some(row) = doc.lines().find(|l| l.starts_with(&row_start)) else {
            continue;
        };
        for quoted in help.split('`').skip(1).step_by(2) {
            assert!(
                row.contains(&format!("`{quoted}`")),
                "the HELP text of {name} quotes `{quoted}`, which its row in {OPERATIONS} does not list"
            );
        }
    }
}
