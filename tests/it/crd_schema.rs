//! The `LeaderElection` CRD against the real API server of the test cluster (Kubernetes
//! 1.20.2): it installs with a plain create or replace (1.20 drops the CEL rules, see
//! `crd::install`), also with kubectl as the README says (`--validate=false`), the server fills in every default, and every schema rule (patterns,
//! sizes, enums, required fields) rejects a violating object with HTTP 422. CEL rules are not
//! enforced by 1.20; `tests/it/crd_cel.rs` evaluates them locally.

use crate::common;

use std::time::Duration;

use consul_elector::crd::{
    self, AppliedSession, AppliedSpec, CandidateStatus, LeaderElection, LeaderElectionSpec,
    LeaderElectionStatus, LeaderStatus, LeadershipRecord, Phase, SwitchoverResult,
    SwitchoverStatus, conditions,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use testkit::cluster::{install_crypto_provider, with_namespace};
use tokio::sync::OnceCell;

use common::spec::{minimal_spec, spec_with};

/// Bound on the CRD's installation and on every request.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Installs the CRD once per test binary (other binaries may install it concurrently).
async fn install_crd(client: &Client) {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            if let Err(error) = crd::install(client.clone(), TIMEOUT).await {
                panic!("{error}");
            }
        })
        .await;
}

/// A `LeaderElection` API that accepts any JSON, so that invalid objects can be sent.
fn raw_api(client: Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client,
        namespace,
        &ApiResource::erase::<LeaderElection>(&()),
    )
}

/// Creates a `LeaderElection` `name` with `spec`; the server's answer as JSON, or its error.
async fn create(api: &Api<DynamicObject>, name: &str, spec: Value) -> Result<Value, kube::Error> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": crd::API_VERSION,
        "kind": "LeaderElection",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a well-formed object");
    let created = tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &object))
        .await
        .unwrap_or_else(|_| panic!("creating {name} took more than {TIMEOUT:?}"))?;
    Ok(serde_json::to_value(created).expect("the answer serializes"))
}

#[tokio::test]
async fn a_minimal_object_comes_back_with_every_default() {
    install_crypto_provider();
    with_namespace("crd-defaults", |client, ns| async move {
        install_crd(&client).await;
        let api = raw_api(client, &ns);
        let created = create(&api, "web", minimal_spec()).await.expect("accepted");
        let expected = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "mode": "Managed",
            "session": {"ttl": "15s", "lockDelay": "15s", "behavior": "Release"},
            "labels": {"key": "elector.dev/role", "leader": "leader", "follower": "follower"},
            "candidates": {"requireReady": true},
            "failover": {"delay": "0s"},
            "switchover": {"drainSeconds": 0},
            "failback": {"enabled": false, "minInterval": "60s"},
            "onConsulUnavailable": "Fence",
        });
        assert_eq!(created["spec"], expected);

        // The server's defaults are the code's defaults, and the result validates.
        let election: LeaderElection = serde_json::from_value(created).expect("deserializes");
        let from_code: LeaderElectionSpec =
            serde_json::from_value(minimal_spec()).expect("deserializes");
        assert_eq!(election.spec, from_code);
        let config = crd::validate(&election).expect("valid");
        assert_eq!(config.key, format!("elector/{ns}/web/leader"));
    })
    .await;
}

#[tokio::test]
async fn partial_objects_get_the_missing_fields_defaulted() {
    install_crypto_provider();
    with_namespace("crd-partial", |client, ns| async move {
        install_crd(&client).await;
        let api = raw_api(client, &ns);
        let mut spec = minimal_spec();
        spec["session"] = json!({"ttl": "30s"});
        spec["labels"] = json!({"key": "example.com/primary"});
        spec["unknownField"] = json!("pruned");
        let created = create(&api, "partial", spec).await.expect("accepted");
        assert_eq!(
            created["spec"]["session"],
            json!({"ttl": "30s", "lockDelay": "15s", "behavior": "Release"})
        );
        assert_eq!(
            created["spec"]["labels"],
            json!({"key": "example.com/primary", "leader": "leader", "follower": "follower"})
        );
        assert_eq!(
            created["spec"].get("unknownField"),
            None,
            "unknown fields are pruned"
        );
    })
    .await;
}

#[tokio::test]
async fn a_fully_specified_object_round_trips() {
    install_crypto_provider();
    with_namespace("crd-full", |client, ns| async move {
        install_crd(&client).await;
        let api = raw_api(client, &ns);
        let spec = json!({
            "selector": {
                // No empty label value: the test cluster's apiserver (Debian's 1.20 build) takes
                // an empty string in a custom resource for null and refuses it.
                "matchLabels": {"app": "web", "tier": "frontend"},
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]},
                    {"key": "example.com/canary", "operator": "DoesNotExist"},
                ],
            },
            "mode": "Observe",
            "key": "locks/web,primary/.leader",
            "consul": {
                "address": "https://consul.consul.svc:8501",
                "datacenter": "dc1",
                "namespace": "team-a",
                "partition": "east",
                "tokenSecretRef": {"name": "consul-token", "key": "token"},
            },
            "session": {"ttl": "1m30s", "lockDelay": "0", "behavior": "Delete"},
            "labels": {"key": "role", "leader": "primary", "follower": "replica"},
            "candidates": {"requireReady": false},
            "failover": {"delay": "1.5s"},
            "switchover": {"drainSeconds": 300},
            "failback": {"enabled": true, "minInterval": "5m"},
            "onConsulUnavailable": "KeepLeader",
        });
        let created = create(&api, "full", spec.clone()).await.expect("accepted");
        assert_eq!(created["spec"], spec);
    })
    .await;
}

/// Every schema rule, each with an object breaking it and nothing else. (The test cluster's
/// apiserver, Debian's 1.20 build, also takes an empty string for null, so the `""` cases are
/// refused there for that reason too; a conformant apiserver refuses them by minLength.)
fn schema_violations() -> Vec<(&'static str, Value)> {
    vec![
        ("spec.selector", json!({})),
        ("spec.selector", json!({"selector": {}})),
        (
            "spec.selector.matchLabels",
            json!({"selector": {"matchLabels": {}}}),
        ),
        (
            "spec.selector.matchExpressions",
            json!({"selector": {"matchExpressions": []}}),
        ),
        (
            "spec.selector.matchLabels",
            json!({"selector": {"matchLabels": {"app": "-web"}}}),
        ),
        (
            "spec.selector.matchExpressions",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Has"}]}}),
        ),
        (
            "spec.selector.matchExpressions",
            json!({"selector": {"matchExpressions": [{"key": "bad key", "operator": "Exists"}]}}),
        ),
        ("spec.session.ttl", spec_with("/session/ttl", json!("15"))),
        ("spec.session.ttl", spec_with("/session/ttl", json!("15 s"))),
        (
            "spec.session.lockDelay",
            spec_with("/session/lockDelay", json!("1d")),
        ),
        (
            "spec.failover.delay",
            spec_with("/failover/delay", json!("-1s")),
        ),
        (
            "spec.switchover.drainSeconds",
            spec_with("/switchover/drainSeconds", json!(301)),
        ),
        (
            "spec.failback.minInterval",
            spec_with("/failback/minInterval", json!("1 m")),
        ),
        ("spec.key", spec_with("/key", json!("/elector/web"))),
        ("spec.key", spec_with("/key", json!("elector//web"))),
        ("spec.key", spec_with("/key", json!("elector/../web"))),
        ("spec.key", spec_with("/key", json!("elector/./web"))),
        ("spec.key", spec_with("/key", json!("elector/web/."))),
        ("spec.key", spec_with("/key", json!("elector/my web"))),
        ("spec.key", spec_with("/key", json!("elector/*"))),
        ("spec.key", spec_with("/key", json!("elector/web/"))),
        ("spec.key", spec_with("/key", json!(""))),
        (
            "spec.labels.key",
            spec_with("/labels/key", json!("bad key")),
        ),
        (
            "spec.labels.key",
            spec_with("/labels/key", json!("Example.com/role")),
        ),
        ("spec.labels.key", spec_with("/labels/key", json!("role/"))),
        ("spec.labels.leader", spec_with("/labels/leader", json!(""))),
        (
            "spec.labels.follower",
            spec_with("/labels/follower", json!("-follower")),
        ),
        (
            "spec.labels.leader",
            spec_with("/labels/leader", json!("l".repeat(64))),
        ),
        ("spec.mode", spec_with("/mode", json!("Elect"))),
        (
            "spec.session.behavior",
            spec_with("/session/behavior", json!("Keep")),
        ),
        (
            "spec.onConsulUnavailable",
            spec_with("/onConsulUnavailable", json!("Panic")),
        ),
        (
            "spec.consul.address",
            spec_with("/consul/address", json!("https://consul/path")),
        ),
        (
            "spec.consul.datacenter",
            spec_with("/consul/datacenter", json!("dc 1")),
        ),
        (
            "spec.consul.namespace",
            spec_with("/consul/namespace", json!("team_a")),
        ),
        (
            "spec.consul.partition",
            spec_with("/consul/partition", json!("-east")),
        ),
        (
            "spec.consul.tokenSecretRef.name",
            spec_with(
                "/consul/tokenSecretRef",
                json!({"name": "Token", "key": "token"}),
            ),
        ),
    ]
}

#[tokio::test]
async fn every_schema_rule_rejects_with_422() {
    install_crypto_provider();
    with_namespace("crd-invalid", |client, ns| async move {
        install_crd(&client).await;
        let api = raw_api(client, &ns);
        for (index, (field, spec)) in schema_violations().into_iter().enumerate() {
            let name = format!("invalid-{index}");
            match create(&api, &name, spec.clone()).await {
                Err(kube::Error::Api(status)) => {
                    assert_eq!(status.code, 422, "{spec} was refused with {status:?}");
                    assert!(
                        status.message.contains(field),
                        "the refusal of {spec} does not name {field}: {}",
                        status.message
                    );
                }
                Err(error) => panic!("{spec} failed with {error}, not a 422"),
                Ok(_) => panic!("{spec} was accepted although it breaks {field}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn the_status_the_operator_writes_is_accepted() {
    install_crypto_provider();
    with_namespace("crd-status", |client, ns| async move {
        install_crd(&client).await;
        create(&raw_api(client.clone(), &ns), "web", minimal_spec())
            .await
            .expect("accepted");
        // Pod times keep nanoseconds; condition times are whole seconds (Kubernetes' format).
        let since: Timestamp = "2026-11-21T22:35:10.123456789Z"
            .parse()
            .expect("a timestamp");
        let changed: Timestamp = "2026-11-21T22:35:10Z".parse().expect("a timestamp");
        let status = LeaderElectionStatus {
            phase: Some(Phase::Elected),
            leader: Some(LeaderStatus {
                pod: "web-0".into(),
                uid: "4f1f8a0e-0000-4000-8000-000000000000".into(),
                pod_ip: Some("10.0.0.7".into()),
                since,
                session_id: Some("adf4238a-882b-9ddc-4a9d-5b6758e4159e".into()),
            }),
            last_leader: Some(LeaderStatus {
                pod: "web-2".into(),
                uid: "4f1f8a0e-0000-4000-8000-000000000002".into(),
                pod_ip: None,
                since,
                session_id: None,
            }),
            fencing_token: Some(u64::from(u32::MAX) + 7),
            transitions: 3,
            revision: Some(u64::from(u32::MAX) + 9),
            served_by: Some("prod-east/consul-elector.consul-elector".into()),
            candidates: vec![
                CandidateStatus {
                    pod: "web-0".into(),
                    eligible: true,
                    reason: None,
                    priority: 5,
                },
                CandidateStatus {
                    pod: "web-1".into(),
                    eligible: false,
                    reason: Some("NotReady".into()),
                    priority: -1,
                },
            ],
            last_switchover: Some(SwitchoverStatus {
                to: "*".into(),
                from: Some("web-2".into()),
                leader: Some("web-0".into()),
                requested_at: since,
                completed_at: Some(changed),
                result: SwitchoverResult::Completed,
                message: "pod web-0 leads".into(),
            }),
            history: vec![
                LeadershipRecord {
                    pod: "web-2".into(),
                    uid: "4f1f8a0e-0000-4000-8000-000000000002".into(),
                    since: changed,
                    until: Some(since),
                    fencing_token: Some(u64::from(u32::MAX) + 6),
                    ended: Some("Switchover".into()),
                },
                LeadershipRecord {
                    pod: "web-0".into(),
                    uid: "4f1f8a0e-0000-4000-8000-000000000000".into(),
                    since,
                    until: None,
                    fencing_token: Some(u64::from(u32::MAX) + 7),
                    ended: None,
                },
            ],
            observed_generation: Some(1),
            applied: Some(AppliedSpec {
                label_key: "elector.dev/role".into(),
                leader: "leader".into(),
                follower: "follower".into(),
                key: "elector/ns/web/leader".into(),
                consul_address: Some("https://consul.example:8501".into()),
                datacenter: Some("dc1".into()),
                consul_namespace: Some("team-a".into()),
                consul_partition: Some("east".into()),
                token_secret_name: Some("consul-token".into()),
                token_secret_key: Some("token".into()),
                session: Some(AppliedSession {
                    ttl: "15s".into(),
                    lock_delay: "15s".into(),
                    behavior: "release".into(),
                }),
            }),
            conditions: vec![Condition {
                type_: conditions::LEADER_ELECTED.into(),
                status: "True".into(),
                reason: "Elected".into(),
                message: "web-0 leads".into(),
                observed_generation: Some(1),
                last_transition_time: Time(changed),
            }],
        };
        let api: Api<LeaderElection> = Api::namespaced(client.clone(), &ns);
        let patch = json!({
            "apiVersion": crd::API_VERSION,
            "kind": "LeaderElection",
            "status": status,
        });
        let params = PatchParams::apply("crd-schema-test").force();
        let patched = tokio::time::timeout(
            TIMEOUT,
            api.patch_status("web", &params, &Patch::Apply(&patch)),
        )
        .await
        .expect("the status patch answers in time")
        .expect("the status is accepted");
        assert_eq!(patched.status, Some(status));

        // `kubectl get le` shows the printer columns.
        let table = get_table(&client, &format!("{}/web", collection_path(&ns))).await;
        let columns: Vec<_> = table["columnDefinitions"]
            .as_array()
            .expect("column definitions")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            columns,
            ["Name", "LEADER", "TOKEN", "TRANSITIONS", "PHASE", "AGE"]
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "web");
        assert_eq!(cells[1], "web-0");
        assert_eq!(cells[2], json!(u64::from(u32::MAX) + 7));
        assert_eq!(cells[3], json!(3));
        assert_eq!(cells[4], "Elected");
    })
    .await;
}

/// The URL path of the `LeaderElection` collection in `namespace`.
fn collection_path(namespace: &str) -> String {
    format!(
        "/apis/{}/namespaces/{namespace}/leaderelections",
        crd::API_VERSION
    )
}

/// `path` as a server-side printed table (what `kubectl get` shows).
async fn get_table(client: &Client, path: &str) -> Value {
    let request = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(Vec::new())
        .expect("a valid request");
    tokio::time::timeout(TIMEOUT, client.request::<Value>(request))
        .await
        .expect("the table answers in time")
        .expect("the table request succeeds")
}

/// The README's CRD commands, with kubectl as a user runs it, on a renamed copy of the CRD
/// (group `kubectl-check.elector.dev`) so that the one the other tests use is never touched.
/// Before 1.25 (the default test cluster's 1.20) the server knows no CEL rules: without
/// `--validate=false` kubectl refuses them, with it `create` and then `replace` work. From
/// 1.25 on, plain `create`, `replace` and `apply --server-side` work.
#[tokio::test]
async fn the_documented_kubectl_commands_install_the_crd() {
    let Some(cluster) = testkit::cluster::TestCluster::shared() else {
        return;
    };
    let kubectl_found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !kubectl_found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl not found (CI=true: this check never skips in CI)"
        );
        eprintln!("SKIPPED: kubectl not found on the PATH");
        return;
    }
    let copy = crd::crd_yaml()
        .expect("the CRD as YAML")
        .replace(
            "name: leaderelections.elector.dev",
            "name: leaderelections.kubectl-check.elector.dev",
        )
        .replace("group: elector.dev", "group: kubectl-check.elector.dev");
    let dir = std::env::temp_dir().join(format!("crd-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("crd.yaml");
    std::fs::write(&file, copy).expect("write the copy");
    let kubectl = |args: &[&str]| {
        let output = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .args(args)
            .arg("-f")
            .arg(&file)
            .output()
            .expect("run kubectl");
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    // Right after a create, the API server's own controllers write the CRD's status
    // (NamesAccepted, then Established), and `kubectl replace`, which reads the object's
    // version before it writes, meets their write as a conflict. A user replaces a CRD that
    // was installed long before; the test waits, with a bound, for what that user finds.
    let established = || {
        let (done, output) = kubectl(&["wait", "--for=condition=Established", "--timeout=60s"]);
        assert!(done, "the CRD copy never became Established: {output}");
    };
    if cluster.version().at_least(1, 25) {
        let (created, output) = kubectl(&["create"]);
        assert!(created, "kubectl create on {}: {output}", cluster.version());
        established();
        for args in [&["replace"][..], &["apply", "--server-side"]] {
            let (done, output) = kubectl(args);
            assert!(done, "kubectl {args:?} on {}: {output}", cluster.version());
        }
    } else {
        let (created, refusal) = kubectl(&["create"]);
        assert!(
            !created && refusal.contains("x-kubernetes-validations"),
            "kubectl create without --validate=false on {}: {refusal}",
            cluster.version()
        );
        let (created, output) = kubectl(&["create", "--validate=false"]);
        assert!(created, "kubectl create --validate=false: {output}");
        established();
        let (replaced, output) = kubectl(&["replace", "--validate=false"]);
        assert!(replaced, "kubectl replace --validate=false: {output}");
    }
    let (deleted, output) = kubectl(&["delete", "--wait=true"]);
    assert!(deleted, "kubectl delete: {output}");
    let _ = std::fs::remove_dir_all(&dir);
}
