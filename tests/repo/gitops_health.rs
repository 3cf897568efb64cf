//! GitOps health of a `LeaderElection`, over one set of fixtures: statuses as the operator's
//! own condition code writes them (`crd::conditions::merge_with_ready`).
//!
//! 1. `kstatus_reads_each_fixture_as_expected`: Flux reads custom resources with kstatus, whose
//!    documented rules for them are: a deleted object is terminating; an `observedGeneration`
//!    behind `metadata.generation` is in progress; `Reconciling=True` is in progress;
//!    `Stalled=True` has failed; anything else is current. An election that can never
//!    progress must read as failed, not in progress until Flux's timeout.
//! 2. `the_argo_cd_health_check_reads_each_fixture_as_expected`: `docs/argocd-health.lua`, run
//!    by a Lua interpreter as Argo CD runs it (the object as the global `obj`, the returned
//!    table's `status`). The interpreter is `$ELECTOR_LUA`, else `lua5.4` or `lua` on the
//!    PATH (`.ci/run` installs Debian's `lua5.4`); without one the check is skipped with a
//!    printed reason, except in CI (`CI=true`), where it fails.

use std::path::Path;
use std::process::Command;

use consul_elector::crd::conditions::{
    EXCLUSIVE, LEADER_ELECTED, SELECTED_BY_OWNER, SPEC_VALID, merge_with_ready,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ARGO_HEALTH: &str = "docs/argocd-health.lua";

/// One status the operator writes, and how each tool must read it.
struct Fixture {
    name: &'static str,
    object: Value,
    kstatus: &'static str,
    argo: &'static str,
}

fn condition(type_: &str, status: bool, reason: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: format!("{type_}: {reason}"),
        observed_generation: Some(2),
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// An election at `generation` whose status the operator wrote for generation 2, in `phase`,
/// with `conditions` (the derived ones added as the operator adds them).
fn election(generation: i64, phase: &str, conditions: Vec<Condition>) -> Value {
    let conditions = merge_with_ready(&[], conditions, 3, Some(2), Timestamp::UNIX_EPOCH);
    json!({
        "apiVersion": "elector.dev/v1alpha1",
        "kind": "LeaderElection",
        "metadata": {"name": "web", "namespace": "shop", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"phase": phase, "observedGeneration": 2, "conditions": conditions},
    })
}

fn fixtures() -> Vec<Fixture> {
    let valid = || condition(SPEC_VALID, true, "Valid");
    let exclusive = || condition(EXCLUSIVE, true, "Exclusive");
    let elected = || condition(LEADER_ELECTED, true, "Elected");
    vec![
        Fixture {
            name: "a pod leads",
            object: election(2, "Elected", vec![elected(), valid(), exclusive()]),
            kstatus: "Current",
            argo: "Healthy",
        },
        Fixture {
            name: "a leader is being elected",
            object: election(
                2,
                "Electing",
                vec![condition(LEADER_ELECTED, false, "Electing"), valid()],
            ),
            kstatus: "InProgress",
            argo: "Progressing",
        },
        Fixture {
            name: "a spec the operator has not acted on yet",
            object: election(3, "Elected", vec![elected(), valid(), exclusive()]),
            kstatus: "InProgress",
            argo: "Progressing",
        },
        Fixture {
            name: "an invalid spec",
            object: election(
                2,
                "Invalid",
                vec![condition(SPEC_VALID, false, "InvalidSpec")],
            ),
            kstatus: "Failed",
            argo: "Degraded",
        },
        Fixture {
            name: "a label key the pods' controller selects",
            object: election(
                2,
                "Invalid",
                vec![condition(SPEC_VALID, false, SELECTED_BY_OWNER)],
            ),
            kstatus: "Failed",
            argo: "Degraded",
        },
        Fixture {
            name: "an older election claims the pods",
            object: election(2, "Conflict", vec![condition(EXCLUSIVE, false, "Conflict")]),
            kstatus: "Failed",
            argo: "Degraded",
        },
        Fixture {
            name: "paused",
            object: election(
                2,
                "Paused",
                vec![condition(LEADER_ELECTED, true, "Elected"), valid()],
            ),
            kstatus: "Current",
            argo: "Suspended",
        },
        Fixture {
            name: "released by the operator's uninstall",
            object: election(
                2,
                "Pending",
                vec![
                    condition(LEADER_ELECTED, false, "Released"),
                    valid(),
                    exclusive(),
                ],
            ),
            kstatus: "Failed",
            argo: "Degraded",
        },
        Fixture {
            name: "no pod selected",
            object: election(
                2,
                "Pending",
                vec![condition(LEADER_ELECTED, false, "NoCandidates"), valid()],
            ),
            kstatus: "InProgress",
            argo: "Progressing",
        },
    ]
}

/// kstatus' status of a custom resource, by its documented rules (see the module docs).
fn kstatus(object: &Value) -> &'static str {
    if !object["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating";
    }
    let observed = &object["status"]["observedGeneration"];
    if !observed.is_null() && *observed != object["metadata"]["generation"] {
        return "InProgress";
    }
    let is_true = |type_: &str| {
        object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    };
    if is_true("Reconciling") {
        return "InProgress";
    }
    if is_true("Stalled") {
        return "Failed";
    }
    "Current"
}

#[test]
fn kstatus_reads_each_fixture_as_expected() {
    for fixture in fixtures() {
        assert_eq!(
            kstatus(&fixture.object),
            fixture.kstatus,
            "{}: {:#}",
            fixture.name,
            fixture.object["status"]
        );
    }
}

/// `value` as a Lua expression.
fn lua(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("[{k:?}] = {}", lua(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

fn interpreter() -> Option<String> {
    if let Ok(lua) = std::env::var("ELECTOR_LUA") {
        return Some(lua);
    }
    ["lua5.4", "lua"]
        .into_iter()
        .map(str::to_owned)
        .find(|lua| {
            Command::new(lua)
                .arg("-v")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn the_argo_cd_health_check_reads_each_fixture_as_expected() {
    let Some(interpreter) = interpreter() else {
        return crate::skip_unless_ci(
            "the_argo_cd_health_check_reads_each_fixture_as_expected",
            "no Lua interpreter",
            "install lua5.4 (`.ci/run` does), or set ELECTOR_LUA",
        );
    };
    let check = std::fs::read_to_string(Path::new(ROOT).join(ARGO_HEALTH)).expect(ARGO_HEALTH);
    for fixture in fixtures() {
        // As Argo CD runs it: the object as `obj`, the script's body as a function.
        let program = format!(
            "obj = {}\nlocal hs = (function()\n{check}\nend)()\nio.write(hs.status, \"\\n\", hs.message or \"\")",
            lua(&fixture.object)
        );
        let output = Command::new(&interpreter)
            .args(["-e", &program])
            .output()
            .unwrap_or_else(|e| panic!("run {interpreter}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{}: {}",
            fixture.name,
            String::from_utf8_lossy(&output.stderr)
        );
        let (status, message) = stdout.split_once('\n').unwrap_or((&stdout, ""));
        assert_eq!(status, fixture.argo, "{}: {message}", fixture.name);
        assert!(!message.is_empty(), "{}: no message", fixture.name);
    }
}
