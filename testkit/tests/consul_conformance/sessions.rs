//! Cases 1-20: session create and validation, destroy, renew, info, list, node.

use std::time::Duration;

use testkit::consul::CheckStatus;

use crate::target::{Needs, Target, num};

/// Whether the server knows `NodeChecks` and `ServiceChecks` (1.7 on: `docs/consul.md` §13,
/// "Versions", cases 1 and 10).
fn node_checks_era(t: &Target) -> bool {
    t.version().at_least(1, 7)
}

/// Asserts that `fields` appear in this order in the raw JSON text.
fn assert_field_order(raw: &str, fields: &[&str]) {
    let mut last = 0;
    for f in fields {
        let needle = format!("\"{f}\":");
        let pos = raw[last..]
            .find(&needle)
            .map(|p| p + last)
            .unwrap_or_else(|| panic!("field {f} missing or out of order in {raw}"));
        last = pos + needle.len();
    }
}

pub async fn case_01_create_with_no_body_applies_defaults(t: &Target) {
    let r = t.put("/v1/session/create", Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("X-Consul-Index").is_none(),
        "create carries no index"
    );
    let id = r.json()["ID"].as_str().expect("ID").to_owned();
    assert_eq!(id.len(), 36);
    let parts: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12], "uuid layout of {id}");
    assert!(
        id.chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "lowercase hex: {id}"
    );

    let r = t.get(&format!("/v1/session/info/{id}")).await;
    assert_eq!(r.status, 200);
    let raw = r.text();
    let s = &r.json()[0];
    if node_checks_era(t) {
        assert_field_order(
            &raw,
            &[
                "ID",
                "Name",
                "Node",
                "LockDelay",
                "Behavior",
                "TTL",
                "NodeChecks",
                "ServiceChecks",
                "CreateIndex",
                "ModifyIndex",
            ],
        );
        assert!(!raw.contains("\"Checks\""), "no Checks key: {raw}");
        assert_eq!(s["NodeChecks"], serde_json::json!(["serfHealth"]));
        assert!(s["ServiceChecks"].is_null());
    } else {
        // Before 1.7 the only check list is `Checks`.
        assert_field_order(
            &raw,
            &[
                "ID",
                "Name",
                "Node",
                "Checks",
                "LockDelay",
                "Behavior",
                "TTL",
                "CreateIndex",
                "ModifyIndex",
            ],
        );
        assert!(!raw.contains("NodeChecks"), "no NodeChecks key: {raw}");
        assert_eq!(s["Checks"], serde_json::json!(["serfHealth"]));
    }
    assert_eq!(s["ID"], id.as_str());
    assert_eq!(s["Name"], "");
    assert_eq!(s["Node"], t.node());
    assert_eq!(s["LockDelay"], 15_000_000_000u64);
    assert_eq!(s["Behavior"], "release");
    assert_eq!(s["TTL"], "");
    assert_eq!(num(s, "CreateIndex"), num(s, "ModifyIndex"));
}

pub async fn case_02_ttl_below_minimum_is_rejected_and_creates_nothing(t: &Target) {
    let before = t.get("/v1/session/list").await.json();
    let r = t.put("/v1/session/create", r#"{"TTL":"9s"}"#).await;
    r.assert_error(
        500,
        "Invalid Session TTL '9000000000', must be between [10s=24h0m0s]",
    );
    let after = t.get("/v1/session/list").await.json();
    assert_eq!(before, after, "no session was created");
}

pub async fn case_03_ttl_bounds_are_inclusive_and_echoed_verbatim(t: &Target) {
    let r = t.put("/v1/session/create", r#"{"TTL":"86401s"}"#).await;
    r.assert_error(500, "Invalid Session TTL '86401000000000'");
    for ttl in ["10s", "86400s"] {
        let id = t.session(&format!(r#"{{"TTL":"{ttl}"}}"#)).await;
        assert_eq!(t.info(&id).await[0]["TTL"], ttl);
    }
}

pub async fn case_04_ttl_without_unit_is_invalid(t: &Target) {
    let r = t.put("/v1/session/create", r#"{"TTL":"10"}"#).await;
    r.assert_error(500, "Session TTL '10' invalid");
}

pub async fn case_05_zero_ttl_means_no_expiry(t: &Target) {
    let id = t.session(r#"{"TTL":"0s"}"#).await;
    assert_eq!(t.info(&id).await[0]["TTL"], "0s");
    if t.supports(Needs::VirtualTime) {
        t.elapse(Duration::from_secs(3 * 86_400)).await;
        assert_eq!(t.info(&id).await[0]["ID"], id.as_str(), "still alive");
    }
}

pub async fn case_06_behavior_is_case_sensitive(t: &Target) {
    let r = t
        .put("/v1/session/create", r#"{"Behavior":"Release"}"#)
        .await;
    r.assert_error(500, "Invalid Behavior setting 'Release'");
    let id = t.session(r#"{"Behavior":"delete"}"#).await;
    assert_eq!(t.info(&id).await[0]["Behavior"], "delete");
}

pub async fn case_07_lock_delay_string_without_unit_fails_decoding(t: &Target) {
    let r = t.put("/v1/session/create", r#"{"LockDelay":"15"}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().starts_with("Request decode failed:"),
        "{}",
        r.text()
    );
}

pub async fn case_08_lock_delay_units_threshold_and_no_upper_bound(t: &Target) {
    for (body, expected) in [
        (r#"{"LockDelay":5}"#, 5_000_000_000u64),
        (r#"{"LockDelay":"0s"}"#, 0),
        (r#"{"LockDelay":"120s"}"#, 120_000_000_000),
    ] {
        let id = t.session(body).await;
        assert_eq!(t.info(&id).await[0]["LockDelay"], expected, "{body}");
    }
}

pub async fn case_09_unknown_node_is_rejected(t: &Target) {
    let r = t.put("/v1/session/create", r#"{"Node":"ghost"}"#).await;
    r.assert_error(500, "Missing node registration");
}

pub async fn case_10_unknown_node_check_is_rejected(t: &Target) {
    let r = t
        .put("/v1/session/create", r#"{"NodeChecks":["nope"]}"#)
        .await;
    if node_checks_era(t) {
        r.assert_error(500, "Missing check 'nope' registration");
    } else {
        // An unknown field is ignored: the session gets the default `Checks`.
        assert_eq!(r.status, 200, "{}", r.text());
        let id = r.json()["ID"].as_str().expect("ID").to_owned();
        let s = &t.info(&id).await[0];
        assert_eq!(s["Checks"], serde_json::json!(["serfHealth"]), "{s}");
        t.put(&format!("/v1/session/destroy/{id}"), Vec::new())
            .await
            .assert_bool(true);
    }
}

pub async fn case_11_critical_serf_health_blocks_default_create(t: &Target) {
    if !t.supports(Needs::CatalogHooks) {
        return;
    }
    t.emu()
        .set_check_status("node1", "serfHealth", CheckStatus::Critical);
    let r = t.put("/v1/session/create", Vec::new()).await;
    r.assert_error(500, "Check 'serfHealth' is in critical state");
}

pub async fn case_12_session_without_node_checks_survives_critical_serf_health(t: &Target) {
    let id = t.session(r#"{"NodeChecks":[]}"#).await;
    let s = &t.info(&id).await[0];
    if !node_checks_era(t) {
        // Before 1.7 the field is unknown and ignored: the session gets the default check.
        assert_eq!(s["Checks"], serde_json::json!(["serfHealth"]), "{s}");
        return;
    }
    assert!(
        s["NodeChecks"].is_null() || s["NodeChecks"] == serde_json::json!([]),
        "no node checks: {s}"
    );
    if t.supports(Needs::CatalogHooks) {
        t.emu()
            .set_check_status("node1", "serfHealth", CheckStatus::Critical);
        assert_eq!(t.info(&id).await[0]["ID"], id.as_str(), "still alive");
    }
}

pub async fn case_13_legacy_checks_add_to_serf_health(t: &Target) {
    if !t.supports(Needs::CatalogHooks) {
        return;
    }
    for failing in ["svc-check", "serfHealth"] {
        // Both checks pass again before each round.
        for check in ["svc-check", "serfHealth"] {
            t.emu().register_check("node1", check, CheckStatus::Passing);
        }
        let id = t.session(r#"{"Checks":["svc-check"]}"#).await;
        let s = &t.info(&id).await[0];
        assert_eq!(s["Checks"], serde_json::json!(["svc-check"]), "{s}");
        assert_eq!(s["NodeChecks"], serde_json::json!(["serfHealth"]), "{s}");
        t.emu()
            .set_check_status("node1", failing, CheckStatus::Critical);
        assert_eq!(
            t.info(&id).await,
            serde_json::json!([]),
            "{failing} critical invalidates"
        );
    }
}

pub async fn case_14_destroy_removes_the_session_and_bumps_the_index(t: &Target) {
    let id = t.default_session().await;
    let before = t.sessions_index().await;
    t.put(&format!("/v1/session/destroy/{id}"), Vec::new())
        .await
        .assert_bool(true);
    assert_eq!(t.info(&id).await, serde_json::json!([]));
    let list = t.get("/v1/session/list").await;
    assert!(
        list.json()
            .as_array()
            .expect("list")
            .iter()
            .all(|s| s["ID"] != id.as_str())
    );
    assert!(list.index() > before, "sessions index increased");
}

pub async fn case_15_destroy_of_unknown_or_malformed_session_is_idempotent(t: &Target) {
    t.put(
        "/v1/session/destroy/00000000-0000-0000-0000-000000000000",
        Vec::new(),
    )
    .await
    .assert_bool(true);
    let r = t.put("/v1/session/destroy/not-a-uuid", Vec::new()).await;
    if t.version().at_least(1, 11) {
        // The sessions table is indexed by the lowercased ID string.
        r.assert_bool(true);
    } else {
        // The sessions table's UUID index refuses to look up anything else.
        r.assert_error(500, "UUID must be 36 characters");
    }
}

pub async fn case_16_missing_path_segments_are_400(t: &Target) {
    t.put("/v1/session/destroy/", Vec::new())
        .await
        .assert_error(400, "Missing session");
    t.get("/v1/session/node/")
        .await
        .assert_error(400, "Missing node name");
}

pub async fn case_17_renew_writes_nothing(t: &Target) {
    let id = t.session(r#"{"TTL":"10s"}"#).await;
    let before = t.info(&id).await[0].clone();
    let index_before = t.sessions_index().await;
    let r = t.put(&format!("/v1/session/renew/{id}"), Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("X-Consul-Index").is_none());
    let arr = r.json();
    assert_eq!(arr.as_array().map(Vec::len), Some(1));
    assert_eq!(arr[0]["ID"], id.as_str());
    assert_eq!(arr[0]["TTL"], "10s");
    let after = t.info(&id).await[0].clone();
    assert_eq!(num(&before, "ModifyIndex"), num(&after, "ModifyIndex"));
    assert_eq!(index_before, t.sessions_index().await);
}

pub async fn case_18_renew_of_unknown_session_is_404(t: &Target) {
    let unknown = "3f1b1f55-0000-4000-8000-000000000000";
    let r = t
        .put(&format!("/v1/session/renew/{unknown}"), Vec::new())
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.text().trim(), format!("Session id '{unknown}' not found"));
}

pub async fn case_19_renew_with_get_is_405(t: &Target) {
    let id = t.default_session().await;
    let r = t.get(&format!("/v1/session/renew/{id}")).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow").as_deref(), Some("OPTIONS,PUT"));
    assert_eq!(r.text().trim(), "method GET not allowed");
}

pub async fn case_20_info_and_node_of_unknown_are_empty_arrays(t: &Target) {
    let r = t
        .get("/v1/session/info/3f1b1f55-0000-4000-8000-000000000000")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!([]));
    if t.version().at_least(1, 3) {
        assert!(r.index() >= 1, "X-Consul-Index is never 0");
    } else if t.owns_server() {
        // Older agents send the sessions table's index as it is: 0 before any session write.
        assert_eq!(r.index(), 0, "a fresh sessions table");
    }
    let r = t.get("/v1/session/node/ghost").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!([]));
}
