//! Every manifest in `examples/` is checked the way a cluster would check it, without one:
//!
//! - each `LeaderElection` gets the API server's treatment: the CRD's defaults applied, then
//!   its OpenAPI schema (types, required fields, patterns, lengths, enums; unknown fields are
//!   errors, as with `kubectl --validate=strict`), then its CEL rules (kube's `cel` feature),
//!   and finally the operator's own `crd::validate`;
//! - every other object must deserialize into its k8s-openapi type *without losing a field*
//!   (serde ignores unknown fields, so a typo such as `replica: 3` would otherwise pass);
//! - the objects fit together: each election selects the pods of a Deployment in the same
//!   file, each Service selecting the role label uses the election's label and values and
//!   names a port the pods have, every image has a pinned tag, every ConfigMap a pod mounts is
//!   in the file;
//! - the programs inside the examples run: the role reader's shell loop, the leader
//!   worker's Python worker and fencing sink, the leader-only job's shell script and its
//!   store's fenced write, and the sharded worker's shell loop are executed here against fake
//!   downward-API files;
//! - a real API server (the 1.20 test cluster) accepts every object in a server-side dry run,
//!   which adds Kubernetes' own validation of Deployments and Services (CEL rules excepted:
//!   1.20 does not enforce them, the local check above does).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use consul_elector::crd::{self, LeaderElection, selector_matches};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodTemplateSpec, Service};
use kube::core::cel::{Validator, apply_defaults};
use regex::Regex;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");

/// The example files the documentation promises.
const EXPECTED_FILES: [&str; 4] = [
    "leader-worker.yaml",
    "role-reader.yaml",
    "sharded-locks.yaml",
    "web.yaml",
];

/// One YAML document of an example file.
#[derive(Debug, Clone)]
struct Document {
    file: String,
    index: usize,
    value: Value,
}

impl Document {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn at(&self) -> String {
        format!(
            "{} document {} ({} {})",
            self.file,
            self.index,
            self.kind(),
            self.name()
        )
    }

    fn typed<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.value.clone())
            .unwrap_or_else(|error| panic!("{}: {error}", self.at()))
    }
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(EXAMPLES)
        .expect("examples/ exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        })
        .collect();
    files.sort();
    files
}

/// Every document of `path`, as JSON values.
fn documents_of(path: &Path) -> Vec<Document> {
    let text = std::fs::read_to_string(path).expect("readable example");
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let values: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|error| panic!("{file} is not valid YAML: {error}"));
    values
        .into_iter()
        .filter(|v| !v.is_null())
        .enumerate()
        .map(|(index, value)| Document {
            file: file.clone(),
            index: index + 1,
            value,
        })
        .collect()
}

fn all_documents() -> Vec<Document> {
    example_files()
        .iter()
        .flat_map(|p| documents_of(p))
        .collect()
}

// ---------------------------------------------------------------------------------------
// A structural OpenAPI v3 validator: the subset of keywords a Kubernetes structural schema
// may use. Anything else makes it panic, so it can never pass an object by ignoring a rule.

/// Keywords that carry no constraint checked here (documentation, defaults applied before,
/// list semantics for server-side apply, CEL rules evaluated separately).
const NON_CONSTRAINTS: [&str; 7] = [
    "description",
    "default",
    "title",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "example",
];

fn check_schema(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(rules) = schema.as_object() else {
        panic!("{path}: schema is not an object: {schema}");
    };
    for keyword in rules.keys() {
        let known = NON_CONSTRAINTS.contains(&keyword.as_str())
            || [
                "type",
                "nullable",
                "properties",
                "required",
                "additionalProperties",
                "items",
                "enum",
                "pattern",
                "minLength",
                "maxLength",
                "minimum",
                "maximum",
                "minItems",
                "maxItems",
                "minProperties",
                "maxProperties",
                "format",
                "x-kubernetes-int-or-string",
                "x-kubernetes-preserve-unknown-fields",
            ]
            .contains(&keyword.as_str());
        assert!(
            known,
            "{path}: the validator does not implement {keyword:?}"
        );
    }
    if value.is_null() {
        if rules.get("nullable") != Some(&Value::Bool(true)) {
            errors.push(format!("{path}: must not be null"));
        }
        return;
    }
    let int_or_string = rules.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            errors.push(format!("{path}: must be an integer or a string"));
        }
    } else if let Some(kind) = rules.get("type").and_then(Value::as_str) {
        let ok = match kind {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => panic!("{path}: unknown type {other}"),
        };
        if !ok {
            errors.push(format!("{path}: must be of type {kind}, not {value}"));
            return;
        }
    }
    if let Some(allowed) = rules.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = rules.get("minLength").and_then(Value::as_u64)
            && length < min
        {
            errors.push(format!("{path}: shorter than {min}"));
        }
        if let Some(max) = rules.get("maxLength").and_then(Value::as_u64)
            && length > max
        {
            errors.push(format!("{path}: longer than {max}"));
        }
        if let Some(pattern) = rules.get("pattern").and_then(Value::as_str) {
            let regex = Regex::new(pattern)
                .unwrap_or_else(|error| panic!("{path}: bad pattern {pattern}: {error}"));
            if !regex.is_match(text) {
                errors.push(format!("{path}: {text:?} does not match {pattern}"));
            }
        }
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = rules.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            errors.push(format!("{path}: less than {min}"));
        }
        if let Some(max) = rules.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            errors.push(format!("{path}: more than {max}"));
        }
    }
    if let Some(items) = value.as_array() {
        let count = items.len() as u64;
        if let Some(min) = rules.get("minItems").and_then(Value::as_u64)
            && count < min
        {
            errors.push(format!("{path}: fewer than {min} items"));
        }
        if let Some(max) = rules.get("maxItems").and_then(Value::as_u64)
            && count > max
        {
            errors.push(format!("{path}: more than {max} items"));
        }
        if let Some(item_schema) = rules.get("items") {
            for (i, item) in items.iter().enumerate() {
                check_schema(item_schema, item, &format!("{path}[{i}]"), errors);
            }
        }
    }
    if let Some(fields) = value.as_object() {
        let count = fields.len() as u64;
        if let Some(min) = rules.get("minProperties").and_then(Value::as_u64)
            && count < min
        {
            errors.push(format!("{path}: fewer than {min} fields"));
        }
        if let Some(max) = rules.get("maxProperties").and_then(Value::as_u64)
            && count > max
        {
            errors.push(format!("{path}: more than {max} fields"));
        }
        for required in rules
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !fields.contains_key(required) {
                errors.push(format!("{path}.{required}: required"));
            }
        }
        let properties = rules.get("properties").and_then(Value::as_object);
        let preserve =
            rules.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        for (name, field) in fields {
            let field_path = format!("{path}.{name}");
            if let Some(field_schema) = properties.and_then(|p| p.get(name)) {
                check_schema(field_schema, field, &field_path, errors);
            } else if let Some(additional) = rules.get("additionalProperties") {
                match additional {
                    Value::Bool(true) => {}
                    Value::Bool(false) => errors.push(format!("{field_path}: unknown field")),
                    schema => check_schema(schema, field, &field_path, errors),
                }
            } else if !preserve {
                errors.push(format!("{field_path}: unknown field"));
            }
        }
    }
}

/// Whether `name` is a DNS subdomain (RFC 1123), the syntax of most object names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .unwrap()
            .is_match(name)
}

/// Everything the API server and the operator would say about a `LeaderElection` document:
/// empty when it would be accepted and elect.
fn leader_election_problems(object: &Value) -> Vec<String> {
    let schema = common::crd::schema();
    let mut errors = Vec::new();
    // The root's apiVersion, kind and metadata are the API server's, not in the CRD schema.
    if object["apiVersion"] != json!(crd::API_VERSION) {
        errors.push(format!("apiVersion must be {}", crd::API_VERSION));
    }
    if object["kind"] != json!("LeaderElection") {
        errors.push("kind must be LeaderElection".to_owned());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    if !is_dns_subdomain(name) {
        errors.push(format!("metadata.name {name:?} is not a DNS subdomain"));
    }
    let mut body = object.clone();
    if let Some(map) = body.as_object_mut() {
        for key in ["apiVersion", "kind", "metadata"] {
            map.remove(key);
        }
    }
    // The API server defaults first, then validates the schema and the CEL rules.
    let defaulted = apply_defaults(&schema, &body);
    check_schema(&schema, &defaulted, "", &mut errors);
    if errors.is_empty() {
        let mut full = defaulted.clone();
        full["apiVersion"] = object["apiVersion"].clone();
        full["kind"] = object["kind"].clone();
        full["metadata"] = object["metadata"].clone();
        if full["metadata"]["namespace"].is_null() {
            full["metadata"]["namespace"] = json!("default");
        }
        if let Err(cel) = Validator::new().validate(&schema, &full, None) {
            errors.extend(cel.iter().map(|e| format!("CEL: {e}")));
        }
        match serde_json::from_value::<LeaderElection>(full) {
            Ok(election) => {
                if let Err(problems) = crd::validate(&election) {
                    errors.extend(problems.iter().map(|p| format!("operator: {p}")));
                }
            }
            Err(error) => errors.push(format!("does not deserialize: {error}")),
        }
    }
    errors
}

/// Whether every field of `original` is in `round_trip` with the same value: what a typed
/// deserialization kept of the object. Returns the first lost path.
fn lost_field(original: &Value, round_trip: &Value, path: &str) -> Option<String> {
    match (original, round_trip) {
        (Value::Object(a), Value::Object(b)) => {
            a.iter().find_map(|(key, value)| match b.get(key) {
                Some(kept) => lost_field(value, kept, &format!("{path}.{key}")),
                // serde skips empty collections and nulls when serializing.
                None if value.is_null() || value == &json!({}) || value == &json!([]) => None,
                None => Some(format!("{path}.{key}")),
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| lost_field(x, y, &format!("{path}[{i}]"))),
        (a, b) if a == b => None,
        _ => Some(format!("{path} ({original} became {round_trip})")),
    }
}

/// Deserializes `doc` into `T` and checks that nothing was dropped.
fn typed_without_loss<T: DeserializeOwned + serde::Serialize>(doc: &Document) -> T {
    let typed: T = doc.typed();
    let back = serde_json::to_value(&typed).expect("serializes");
    if let Some(path) = lost_field(&doc.value, &back, "") {
        panic!(
            "{}: field {path} is not part of the {} type (a typo?)",
            doc.at(),
            doc.kind()
        );
    }
    typed
}

// ---------------------------------------------------------------------------------------

#[test]
fn the_promised_examples_exist() {
    let names: BTreeSet<String> = example_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in EXPECTED_FILES {
        assert!(
            names.contains(expected),
            "examples/{expected} is missing: {names:?}"
        );
    }
}

#[test]
fn every_leader_election_passes_schema_cel_and_the_operators_validation() {
    let mut checked = 0;
    for doc in all_documents()
        .iter()
        .filter(|d| d.kind() == "LeaderElection")
    {
        let problems = leader_election_problems(&doc.value);
        assert!(
            problems.is_empty(),
            "{}:\n  {}",
            doc.at(),
            problems.join("\n  ")
        );
        checked += 1;
    }
    assert!(
        checked >= EXPECTED_FILES.len(),
        "only {checked} LeaderElections"
    );
}

#[test]
fn every_other_object_is_a_known_kind_without_unknown_fields() {
    for doc in all_documents() {
        assert!(
            doc.value["metadata"]["namespace"].is_null(),
            "{}: examples go into the namespace of `kubectl apply -n`",
            doc.at()
        );
        assert!(is_dns_subdomain(doc.name()), "{}: bad name", doc.at());
        match (
            doc.value["apiVersion"].as_str().unwrap_or_default(),
            doc.kind(),
        ) {
            ("apps/v1", "Deployment") => {
                typed_without_loss::<Deployment>(&doc);
            }
            ("v1", "Service") => {
                typed_without_loss::<Service>(&doc);
            }
            ("v1", "ConfigMap") => {
                typed_without_loss::<ConfigMap>(&doc);
            }
            (crd::API_VERSION, "LeaderElection") => {}
            (api_version, kind) => panic!("{}: unexpected {api_version} {kind}", doc.at()),
        }
    }
}

/// The Deployments of `docs` with their pod templates.
fn deployments(docs: &[Document]) -> Vec<(String, PodTemplateSpec)> {
    docs.iter()
        .filter(|d| d.kind() == "Deployment")
        .map(|d| {
            let deployment: Deployment = d.typed();
            let spec = deployment.spec.expect("a Deployment spec");
            (d.name().to_owned(), spec.template)
        })
        .collect()
}

fn template_labels(template: &PodTemplateSpec) -> BTreeMap<String, String> {
    template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn containers(template: &PodTemplateSpec) -> Vec<Container> {
    template
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default()
}

#[test]
fn each_election_selects_exactly_one_deployment_of_its_file() {
    for file in example_files() {
        let docs = documents_of(&file);
        let deployments = deployments(&docs);
        for doc in docs.iter().filter(|d| d.kind() == "LeaderElection") {
            let election: LeaderElection = doc.typed();
            let selected: Vec<&str> = deployments
                .iter()
                .filter(|(_, t)| selector_matches(&election.spec.selector, &template_labels(t)))
                .map(|(name, _)| name.as_str())
                .collect();
            assert_eq!(selected.len(), 1, "{} selects {selected:?}", doc.at());
            // The Deployment's own selector picks the same pods, and the role label the
            // operator writes cannot change which pods the Deployment owns.
            let (_, template) = deployments.iter().find(|(n, _)| n == selected[0]).unwrap();
            let labels = template_labels(template);
            assert!(
                !labels.contains_key(&election.spec.labels.key),
                "{}",
                doc.at()
            );
        }
    }
}

/// The conflict rule (docs/design.md section 1): two elections selecting the same pod with
/// the same label key conflict, and the younger writes nothing. No example may do that.
#[test]
fn elections_sharing_pods_use_distinct_label_keys() {
    for file in example_files() {
        let docs = documents_of(&file);
        let deployments = deployments(&docs);
        let mut claims: BTreeMap<(String, String), String> = BTreeMap::new();
        for doc in docs.iter().filter(|d| d.kind() == "LeaderElection") {
            let election: LeaderElection = doc.typed();
            for (deployment, template) in &deployments {
                if selector_matches(&election.spec.selector, &template_labels(template)) {
                    let claim = (deployment.clone(), election.spec.labels.key.clone());
                    if let Some(older) = claims.insert(claim, doc.name().to_owned()) {
                        panic!(
                            "{}: {older} already writes {} on the pods of {deployment}",
                            doc.at(),
                            election.spec.labels.key
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_sharded_example_has_one_election_per_shard_label_the_worker_reads() {
    let docs = documents_of(&Path::new(EXAMPLES).join("sharded-locks.yaml"));
    let keys: BTreeSet<String> = docs
        .iter()
        .filter(|d| d.kind() == "LeaderElection")
        .map(|d| d.typed::<LeaderElection>().spec.labels.key)
        .collect();
    let container = container_args("sharded-locks.yaml", "sharded-locks");
    let shards: usize = container
        .env
        .unwrap_or_default()
        .iter()
        .find(|e| e.name == "SHARDS")
        .and_then(|e| e.value.as_deref())
        .expect("SHARDS is set")
        .parse()
        .expect("SHARDS is a number");
    let expected: BTreeSet<String> = (0..shards)
        .map(|n| format!("shard.example.com/{n}"))
        .collect();
    assert_eq!(keys, expected, "one election per shard the worker reads");
    assert!(shards >= 2);
}

#[test]
fn role_services_select_the_elections_label_and_existing_ports() {
    let mut role_services = 0;
    for file in example_files() {
        let docs = documents_of(&file);
        let deployments = deployments(&docs);
        let elections: Vec<LeaderElection> = docs
            .iter()
            .filter(|d| d.kind() == "LeaderElection")
            .map(Document::typed)
            .collect();
        for doc in docs.iter().filter(|d| d.kind() == "Service") {
            let service: Service = doc.typed();
            let spec = service.spec.expect("a Service spec");
            let selector = spec.selector.clone().unwrap_or_default();
            assert!(
                !selector.is_empty(),
                "{}: a Service without a selector",
                doc.at()
            );
            // The pods the Service reaches, ignoring the operator's label.
            let (base, role): (BTreeMap<_, _>, BTreeMap<_, _>) = selector
                .into_iter()
                .partition(|(k, _)| !elections.iter().any(|e| &e.spec.labels.key == k));
            let targets: Vec<&(String, PodTemplateSpec)> = deployments
                .iter()
                .filter(|(_, t)| {
                    let labels = template_labels(t);
                    base.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
                .collect();
            assert_eq!(
                targets.len(),
                1,
                "{} reaches {} Deployments",
                doc.at(),
                targets.len()
            );
            if let Some((key, value)) = role.iter().next() {
                role_services += 1;
                let election = elections
                    .iter()
                    .find(|e| {
                        &e.spec.labels.key == key
                            && selector_matches(&e.spec.selector, &template_labels(&targets[0].1))
                    })
                    .unwrap_or_else(|| panic!("{}: no election writes {key}", doc.at()));
                assert!(
                    [&election.spec.labels.leader, &election.spec.labels.follower].contains(&value),
                    "{}: {key}={value} is neither the leader nor the follower value",
                    doc.at()
                );
            }
            let port_names: BTreeSet<String> = containers(&targets[0].1)
                .iter()
                .flat_map(|c| c.ports.clone().unwrap_or_default())
                .filter_map(|p| p.name)
                .collect();
            for port in spec.ports.unwrap_or_default() {
                use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
                match port.target_port {
                    Some(IntOrString::String(name)) => {
                        assert!(port_names.contains(&name), "{}: no port {name}", doc.at())
                    }
                    other => panic!("{}: use a named targetPort, not {other:?}", doc.at()),
                }
            }
        }
    }
    assert!(
        role_services >= 2,
        "web.yaml has a leader and a followers Service"
    );
    let web = documents_of(&Path::new(EXAMPLES).join("web.yaml"));
    let web_deployment: Deployment = web
        .iter()
        .find(|d| d.kind() == "Deployment")
        .unwrap()
        .typed();
    assert_eq!(web_deployment.metadata.name.as_deref(), Some("web"));
    assert_eq!(web_deployment.spec.and_then(|s| s.replicas), Some(3));
    let services: BTreeMap<String, BTreeMap<String, String>> = web
        .iter()
        .filter(|d| d.kind() == "Service")
        .map(|d| {
            let s: Service = d.typed();
            (
                d.name().to_owned(),
                s.spec.and_then(|s| s.selector).unwrap_or_default(),
            )
        })
        .collect();
    let selector = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(
        services["web-leader"],
        selector(&[("app", "web"), ("elector.dev/role", "leader")])
    );
    assert_eq!(
        services["web-followers"],
        selector(&[("app", "web"), ("elector.dev/role", "follower")])
    );
}

#[test]
fn images_are_pinned_and_mounted_config_maps_exist() {
    for file in example_files() {
        let docs = documents_of(&file);
        let config_maps: BTreeMap<String, ConfigMap> = docs
            .iter()
            .filter(|d| d.kind() == "ConfigMap")
            .map(|d| (d.name().to_owned(), d.typed()))
            .collect();
        for (name, template) in deployments(&docs) {
            for container in containers(&template) {
                let image = container.image.clone().unwrap_or_default();
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'));
                assert!(
                    matches!(tag, Some((_, t)) if t != "latest" && !t.is_empty()),
                    "{name}: image {image:?} needs a pinned tag"
                );
            }
            let spec = template.spec.clone().expect("a pod spec");
            for volume in spec.volumes.unwrap_or_default() {
                if let Some(source) = volume.config_map {
                    let map = config_maps.get(&source.name).unwrap_or_else(|| {
                        panic!("{name}: ConfigMap {} is not in the file", source.name)
                    });
                    // Every key the volume picks (`items`) is in the ConfigMap.
                    let data = map.data.clone().unwrap_or_default();
                    for item in source.items.clone().unwrap_or_default() {
                        assert!(
                            data.contains_key(&item.key),
                            "{name}: {} not in {}",
                            item.key,
                            source.name
                        );
                    }
                    // Every script a container runs from the mount is in the ConfigMap.
                    let mount = containers(&template)
                        .iter()
                        .flat_map(|c| c.volume_mounts.clone().unwrap_or_default())
                        .find(|m| m.name == volume.name)
                        .expect("the volume is mounted")
                        .mount_path;
                    for container in containers(&template) {
                        for word in container.command.unwrap_or_default() {
                            if let Some(key) = word.strip_prefix(&format!("{mount}/")) {
                                let data = map.data.clone().unwrap_or_default();
                                assert!(
                                    data.contains_key(key),
                                    "{name}: {key} not in {}",
                                    source.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn role_reading_pods_get_labels_and_annotations_through_the_downward_api() {
    for file in [
        "role-reader.yaml",
        "leader-worker.yaml",
        "sharded-locks.yaml",
    ] {
        let docs = documents_of(&Path::new(EXAMPLES).join(file));
        let elections: Vec<LeaderElection> = docs
            .iter()
            .filter(|d| d.kind() == "LeaderElection")
            .map(Document::typed)
            .collect();
        let election = &elections[0];
        let (_, template) = deployments(&docs)
            .into_iter()
            .find(|(_, t)| selector_matches(&election.spec.selector, &template_labels(t)))
            .expect("the elected Deployment");
        let spec = template.spec.expect("a pod spec");
        let fields: BTreeSet<String> = spec
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|v| v.downward_api)
            .flat_map(|d| d.items.unwrap_or_default())
            .filter_map(|item| {
                item.field_ref
                    .map(|f| format!("{}:{}", item.path, f.field_path))
            })
            .collect();
        assert_eq!(
            fields,
            BTreeSet::from([
                "labels:metadata.labels".to_owned(),
                "annotations:metadata.annotations".to_owned()
            ]),
            "{file}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The validator itself: it must reject what the API server rejects, or the tests above prove
// nothing.

#[test]
fn the_validator_rejects_invalid_leader_elections() {
    let valid = json!({
        "apiVersion": "elector.dev/v1alpha1",
        "kind": "LeaderElection",
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    });
    assert_eq!(leader_election_problems(&valid), Vec::<String>::new());
    let with = |pointer: &str, value: Value| {
        let mut object = valid.clone();
        *object.pointer_mut(pointer).expect("an existing parent") = value;
        object
    };
    let object_with_field = |field: &str, value: Value| {
        let mut object = valid.clone();
        object["spec"][field] = value;
        object
    };
    for (object, expected) in [
        (
            object_with_field("replicas", json!(3)),
            ".spec.replicas: unknown field",
        ),
        (object_with_field("mode", json!("Auto")), "is not one of"),
        (
            object_with_field("session", json!({"ttl": 15})),
            "must be of type string",
        ),
        (
            object_with_field("session", json!({"ttl": "15 s"})),
            "does not match",
        ),
        (object_with_field("key", json!("")), "shorter than 1"),
        // Passes the schema, fails a CEL rule.
        (object_with_field("session", json!({"ttl": "5s"})), "CEL: "),
        (
            object_with_field("labels", json!({"leader": "x", "follower": "x"})),
            "CEL: ",
        ),
        (with("/spec/selector", json!({})), "fewer than 1 fields"),
        (with("/spec", json!({})), ".spec.selector: required"),
        (
            with("/kind", json!("Leader")),
            "kind must be LeaderElection",
        ),
        (with("/metadata/name", json!("Web")), "not a DNS subdomain"),
    ] {
        let problems = leader_election_problems(&object);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{object}: expected {expected:?} in {problems:?}"
        );
    }
}

#[test]
fn lost_fields_are_found() {
    let doc = Document {
        file: "inline".to_owned(),
        index: 1,
        value: json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"replica": 3, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}},
        }),
    };
    let typed: Deployment = doc.typed();
    let back = serde_json::to_value(typed).unwrap();
    assert_eq!(
        lost_field(&doc.value, &back, "").as_deref(),
        Some(".spec.replica")
    );
}

// ---------------------------------------------------------------------------------------
// The programs inside the examples, run here against fake downward-API files.

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("consul-elector-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    /// Writes a downward-API file: `key="value"` lines, as the kubelet does.
    fn podinfo(&self, file: &str, pairs: &[(&str, &str)]) {
        let text: String = pairs
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\"\n"))
            .collect();
        // Written aside and renamed, like the kubelet's atomic writer.
        let temporary = self.0.join(format!(".{file}.tmp"));
        std::fs::write(&temporary, text).expect("write podinfo");
        std::fs::rename(temporary, self.0.join(file)).expect("rename podinfo");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the child on drop, so a failing assertion leaves no process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child prints on stdout, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits up to 30 s for a line containing `needle`; returns it.
fn expect_line(lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Err(_) => panic!("no line with {needle:?}; saw:\n{}", seen.join("\n")),
        }
    }
}

/// The first container's script of Deployment `deployment` in `file`.
fn container_args(file: &str, deployment: &str) -> Container {
    let docs = documents_of(&Path::new(EXAMPLES).join(file));
    let doc = docs
        .iter()
        .find(|d| d.kind() == "Deployment" && d.name() == deployment)
        .expect("the Deployment");
    let deployment: Deployment = doc.typed();
    deployment.spec.unwrap().template.spec.unwrap().containers[0].clone()
}

fn config_map_data(file: &str, name: &str) -> BTreeMap<String, String> {
    let docs = documents_of(&Path::new(EXAMPLES).join(file));
    let doc = docs
        .iter()
        .find(|d| d.kind() == "ConfigMap" && d.name() == name)
        .expect("the ConfigMap");
    let map: ConfigMap = doc.typed();
    map.data.unwrap_or_default()
}

#[test]
fn the_role_reader_prints_role_and_token_when_they_change() {
    let container = container_args("role-reader.yaml", "role-reader");
    assert_eq!(
        container.command.as_deref(),
        Some(&["/bin/sh".to_owned(), "-c".to_owned()][..])
    );
    let script = container.args.expect("the script")[0].replace("/etc/podinfo", "$PODINFO_DIR");
    let scratch = Scratch::new("role-reader");
    scratch.podinfo(
        "labels",
        &[("app", "role-reader"), ("elector.dev/role", "follower")],
    );
    scratch.podinfo("annotations", &[]);
    let child = Command::new("sh")
        .args(["-c", &script])
        .env("PODINFO_DIR", &scratch.0)
        .env("POD_NAME", "role-reader-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sh runs");
    let mut child = Running(child);
    let lines = lines_of(&mut child.0);
    let mut seen = Vec::new();
    let first = expect_line(&lines, "role-reader-1 role=", &mut seen);
    assert!(
        first.ends_with("role=follower fencing-token=none leader-since=none"),
        "{first}"
    );
    scratch.podinfo(
        "labels",
        &[("app", "role-reader"), ("elector.dev/role", "leader")],
    );
    scratch.podinfo(
        "annotations",
        &[
            ("elector.dev/fencing-token", "42"),
            ("elector.dev/leader-since", "2026-11-21T10:00:00Z"),
        ],
    );
    let second = expect_line(&lines, "role=leader", &mut seen);
    assert!(
        second.ends_with("role=leader fencing-token=42 leader-since=2026-11-21T10:00:00Z"),
        "{second}"
    );
    // Nothing is printed while nothing changes.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(lines.try_recv().is_err(), "printed without a change");
}

/// A free loopback port (closed again; the sink binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A minimal HTTP/1.0 request to the sink; (status, body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::Write;
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the sink");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad response {response:?}"));
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

#[test]
fn the_leader_worker_writes_only_as_leader_and_the_sink_fences_old_tokens() {
    let data = config_map_data("leader-worker.yaml", "leader-worker-scripts");
    let scratch = Scratch::new("leader-worker");
    std::fs::write(scratch.0.join("sink.py"), &data["sink.py"]).unwrap();
    std::fs::write(scratch.0.join("worker.py"), &data["worker.py"]).unwrap();
    let podinfo = scratch.0.join("podinfo");
    std::fs::create_dir_all(&podinfo).unwrap();
    let pod = Scratch(podinfo.clone());

    // The sink, as its Deployment runs it.
    let port = free_port();
    let sink = Command::new("python3")
        .arg(scratch.0.join("sink.py"))
        .env("PORT", port.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs (the examples' scripts are Python)");
    let mut sink = Running(sink);
    let sink_lines = lines_of(&mut sink.0);
    let mut sink_seen = Vec::new();
    expect_line(&sink_lines, "listening", &mut sink_seen);
    assert_eq!(http(port, "GET", "/healthz", &[], "").0, 200);

    let run_worker = |iterations: u32| -> Vec<String> {
        let output = Command::new("python3")
            .arg(scratch.0.join("worker.py"))
            .env("PODINFO", &podinfo)
            .env("SINK_URL", format!("http://127.0.0.1:{port}"))
            .env("POD_NAME", "worker-a")
            .env("INTERVAL_SECONDS", "0.01")
            .env("ITERATIONS", iterations.to_string())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let writes = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains(" written with token "))
            .count()
    };

    // A follower does no work.
    pod.podinfo(
        "labels",
        &[("app", "leader-worker"), ("elector.dev/role", "follower")],
    );
    pod.podinfo("annotations", &[]);
    let lines = run_worker(5);
    assert_eq!(writes(&lines), 0, "{lines:?}");

    // A leader without its token yet does no work either.
    pod.podinfo(
        "labels",
        &[("app", "leader-worker"), ("elector.dev/role", "leader")],
    );
    let lines = run_worker(5);
    assert_eq!(writes(&lines), 0, "{lines:?}");

    // The leader with token 5 writes every task, each with its token.
    pod.podinfo("annotations", &[("elector.dev/fencing-token", "5")]);
    let lines = run_worker(5);
    assert_eq!(writes(&lines), 5, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("leader with fencing token 5")),
        "{lines:?}"
    );

    // A newer leader (token 7) writes; the old leader, still believing it leads, is fenced on
    // its first write and stops.
    let (status, _) = http(
        port,
        "POST",
        "/write",
        &[("X-Fencing-Token", "7")],
        "{\"pod\":\"worker-b\"}",
    );
    assert_eq!(status, 200);
    let lines = run_worker(5);
    assert_eq!(writes(&lines), 0, "{lines:?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("FENCED")).count(),
        1,
        "{lines:?}"
    );

    // The sink rejected exactly that one write, and kept the newest token.
    let (status, body) = http(port, "POST", "/write", &[("X-Fencing-Token", "6")], "late");
    assert_eq!(status, 409, "{body}");
    let (status, body) = http(port, "POST", "/write", &[("X-Fencing-Token", "x")], "bad");
    assert_eq!(status, 400, "{body}");
    let (_, state) = http(port, "GET", "/", &[], "");
    let state: Value = serde_json::from_str(&state).expect("JSON state");
    assert_eq!(state["highestToken"], 7);
    let tokens: Vec<u64> = state["accepted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["token"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens, [5, 5, 5, 5, 5, 7], "accepted tokens never decrease");

    // Elected again with a higher token, the worker works again.
    pod.podinfo("annotations", &[("elector.dev/fencing-token", "9")]);
    let lines = run_worker(3);
    assert_eq!(writes(&lines), 3, "{lines:?}");
}

// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_real_api_server_accepts_every_example_in_a_dry_run() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};

    testkit::cluster::install_crypto_provider();
    testkit::cluster::with_namespace("examples", |client, ns| async move {
        let timeout = Duration::from_secs(60);
        crd::install(client.clone(), timeout)
            .await
            .expect("the CRD installs");
        let dry_run = PostParams {
            dry_run: true,
            field_manager: None,
        };
        for doc in all_documents() {
            let api_version = doc.value["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, doc.kind());
            let resource = ApiResource::from_gvk(&gvk);
            let api: kube::Api<DynamicObject> =
                kube::Api::namespaced_with(client.clone(), &ns, &resource);
            let object: DynamicObject = doc.typed();
            let created = tokio::time::timeout(timeout, api.create(&dry_run, &object))
                .await
                .unwrap_or_else(|_| panic!("{}: no answer within {timeout:?}", doc.at()));
            if let Err(error) = created {
                panic!("{}: the API server refused it: {error}", doc.at());
            }
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// sharded-locks.yaml: the worker learns the shards it leads from its labels.

#[test]
fn the_sharded_worker_reports_the_shards_it_leads() {
    let scripts = config_map_data("sharded-locks.yaml", "sharded-locks-scripts");
    let scratch = Scratch::new("sharded-locks");
    let script = scratch.0.join("shards.sh");
    std::fs::write(&script, &scripts["shards.sh"]).unwrap();
    let pod = Scratch::new("sharded-locks-podinfo");
    let report = || {
        let output = Command::new("sh")
            .arg(&script)
            .env("PODINFO", &pod.0)
            .env("POD_NAME", "sharded-locks-a")
            .env("SHARDS", "4")
            .env("ONCE", "1")
            .output()
            .expect("sh runs");
        assert!(output.status.success());
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let (_, report) = text
            .split_once(" sharded-locks-a ")
            .unwrap_or_else(|| panic!("no report: {text:?}"));
        report.to_owned()
    };
    assert_eq!(report(), "leads=[] follows=[] tokens=[]");
    pod.podinfo(
        "labels",
        &[
            ("app", "sharded-locks"),
            ("shard.example.com/0", "leader"),
            ("shard.example.com/1", "follower"),
            ("shard.example.com/2", "leader"),
            ("shard.example.com/3", "follower"),
            // Not a shard this worker has: ignored.
            ("shard.example.com/10", "leader"),
            ("shard-example-com/1", "leader"),
        ],
    );
    pod.podinfo(
        "annotations",
        &[
            ("elector.dev/fencing-token", "12"),
            ("elector.dev/election", "sharded-locks-2"),
            ("fencing-token.shard.example.com/0", "7"),
            ("fencing-token.shard.example.com/2", "12"),
            // A follower's token, were one left: not a shard it leads.
            ("fencing-token.shard.example.com/1", "3"),
        ],
    );
    assert_eq!(report(), "leads=[0 2] follows=[1 3] tokens=[0=7 2=12]");
}
