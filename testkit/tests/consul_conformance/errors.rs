//! Cases 69-71: ACL errors, wrong methods and the "no cluster leader" mode.

use std::collections::HashMap;

use testkit::consul::{AclConfig, AclPolicy, EmulatorConfig};

use crate::target::{Needs, Target};

/// An emulator with ACLs: a read-only token `read-only`, and an anonymous token that may do nothing.
pub fn acl_config() -> EmulatorConfig {
    let reader = AclPolicy {
        key_read: vec![String::new()],
        key_write: vec![],
        session_write: false,
        session_read: true,
    };
    EmulatorConfig {
        acl: Some(AclConfig {
            tokens: HashMap::from([("read-only".to_owned(), reader)]),
            anonymous: AclPolicy {
                key_read: vec![],
                key_write: vec![],
                session_write: false,
                session_read: false,
            },
        }),
        ..EmulatorConfig::default()
    }
}

pub async fn case_69_acl_denials(t: &Target) {
    if !t.supports(Needs::Acl) {
        return;
    }
    let path = format!("/v1/kv/{}", t.key("k"));
    let r = t
        .req_with("PUT", &path, "v", &[("X-Consul-Token", "read-only")])
        .await;
    assert_eq!(r.status, 403);
    assert!(r.text().starts_with("Permission denied"), "{}", r.text());
    let r = t
        .req_with("PUT", &path, "v", &[("X-Consul-Token", "no-such-token")])
        .await;
    r.assert_error(403, "ACL not found");
}

pub async fn case_70_wrong_method_on_session_create_is_405(t: &Target) {
    let r = t.delete("/v1/session/create").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow").as_deref(), Some("OPTIONS,PUT"));
    assert_eq!(r.text().trim(), "method DELETE not allowed");
}

pub async fn case_71_no_cluster_leader(t: &Target) {
    if !t.supports(Needs::Faults) {
        return;
    }
    let k = t.key("k");
    t.kv_put(&k, "", "v").await.assert_bool(true);
    t.emu().set_leader(false);
    t.kv_put(&k, "", "w")
        .await
        .assert_error(500, "No cluster leader");
    let r = t.get(&format!("/v1/kv/{k}?stale")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("X-Consul-KnownLeader").as_deref(), Some("false"));
    t.get(&format!("/v1/kv/{k}"))
        .await
        .assert_error(500, "No cluster leader");
}

pub async fn case_79_enterprise_namespaces_and_partitions_are_refused_by_ce(t: &Target) {
    let k = t.key("k");
    let namespaces = "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature";
    t.get(&format!("/v1/kv/{k}?ns=team-a"))
        .await
        .assert_error(400, namespaces);
    t.put(&format!("/v1/kv/{k}?ns=default"), "v")
        .await
        .assert_error(400, namespaces);
    t.put("/v1/session/create?ns=team-a", "{}")
        .await
        .assert_error(400, namespaces);
    assert_eq!(t.kv(&k).await, None, "nothing was written");
    let partitioned = t.get(&format!("/v1/kv/{k}?partition=team-a")).await;
    if t.version().at_least(1, 11) {
        let partitions =
            "Invalid query parameter: \"partition\" - Partitions are a Consul Enterprise feature";
        partitioned.assert_error(400, partitions);
    } else {
        // Before admin partitions existed the parameter meant nothing: the key is read.
        assert_eq!(partitioned.status, 404, "{}", partitioned.text());
    }
}
