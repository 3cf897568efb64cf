//! The security model against a namespace user: an election can make the operator reach only
//! the Consul addresses its admin allowed, the operator's own token goes only to its own
//! address, and connections to an address no election uses any more are closed.
//!
//! A second Consul emulator stands in for "a host of the user's": it records every connection
//! and request, and the token each request carried.

use crate::harness;

use std::time::Duration;

use consul_elector::bounded_read::READ_TIMEOUT;
use harness::{
    Harness, HarnessOptions, OperatorConsul, ROLE, SOON, condition, has_condition, phase,
    status_leader,
};
use kube::api::DeleteParams;
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::consul::{ClockMode, Emulator, EmulatorConfig};
use testkit::kube_faults::{FaultAction as KubeFaultAction, KubeFault};

/// The operator's own token (`CONSUL_HTTP_TOKEN`).
const OPERATOR_TOKEN: &str = "operator-token-3c1f";
/// A tenant's token, in a Secret of its namespace.
const TENANT_TOKEN: &str = "tenant-token-9a7e";

/// Another Consul, for the user's host or an allowed second Consul.
async fn other_consul() -> Emulator {
    Emulator::start(EmulatorConfig {
        clock: ClockMode::Tokio,
        ..EmulatorConfig::default()
    })
    .await
    .expect("emulator")
}

fn elsewhere(address: &str) -> serde_json::Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "consul": {"address": address},
    })
}

/// [`elsewhere`] under its own label key, so it does not conflict with an election `web`.
fn elsewhere_as_api(address: &str) -> serde_json::Value {
    let mut spec = elsewhere(address);
    spec["labels"] = json!({"key": API_ROLE});
    spec
}

/// The label key of the elections named `api`.
const API_ROLE: &str = "example.com/api-role";

async fn harness(
    admin: kube::Client,
    ns: String,
    allowed: Vec<String>,
    secret_access: bool,
) -> Harness {
    let consul = OperatorConsul {
        allowed_addresses: allowed,
        ..OperatorConsul::default()
    };
    harness_with(admin, ns, consul, secret_access).await
}

/// [`harness`] with the operator's Consul configuration `consul`, its token always
/// [`OPERATOR_TOKEN`].
async fn harness_with(
    admin: kube::Client,
    ns: String,
    consul: OperatorConsul,
    secret_access: bool,
) -> Harness {
    let mut h = Harness::with_options(
        admin,
        ns,
        HarnessOptions {
            secret_access,
            operator_consul: OperatorConsul {
                token: Some(OPERATOR_TOKEN.to_owned()),
                ..consul
            },
            ..HarnessOptions::default()
        },
    )
    .await;
    h.deployment("web", 2).await;
    h.start_operator().await;
    h
}

/// Waits until election `name` is `Invalid` with `SpecValid=False`, reason `InvalidSpec`, and
/// returns the condition's message.
async fn refused(h: &Harness, name: &str) -> String {
    let le = h
        .wait_status(name, |le| phase(le).as_deref() == Some("Invalid"))
        .await;
    let valid = condition(&le, "SpecValid").expect("SpecValid");
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidSpec"),
        "{name}"
    );
    valid.message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_the_admin_did_not_allow_is_never_contacted() {
    with_namespace("sec-ssrf", |admin, ns| async move {
        let users_host = other_consul().await;
        let h = harness(admin, ns, Vec::new(), false).await;
        // Both spellings of the same host: with and without a scheme.
        let bare = users_host.url().trim_start_matches("http://").to_owned();
        h.election("web", elsewhere(&users_host.url())).await;
        h.election("api", elsewhere_as_api(&bare)).await;
        for name in ["web", "api"] {
            let message = refused(&h, name).await;
            assert!(
                message.contains("spec.consul.address")
                    && message.contains("--consul-allowed-addresses")
                    && message.contains(&users_host.addr().to_string()),
                "{message}"
            );
            let notes = h.wait_event(name, "InvalidSpec").await;
            assert!(notes.iter().any(|n| n.contains("spec.consul.address")));
            // Another look (as after any change) still sends nothing.
            h.touch_and_wait_reconcile(name).await;
        }
        let seen = users_host.stats();
        assert_eq!(
            (seen.connections_total, seen.total_requests()),
            (0, 0),
            "the user's host was contacted: {seen:?}"
        );
        assert!(
            h.recorder
                .versions()
                .iter()
                .all(|v| !v.labels.contains_key(ROLE) && !v.labels.contains_key(API_ROLE)),
            "no pod was ever labelled"
        );
        assert!(h.emu().kv_entry(&h.key("web")).is_none());
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_address_gets_the_elections_token_or_none_never_the_operators() {
    with_namespace("sec-allowed", |admin, ns| async move {
        let second = other_consul().await;
        let h = harness(admin, ns, vec![second.url()], true).await;

        // No tokenSecretRef: anonymous at the other address.
        h.election("web", elsewhere(&second.url())).await;
        let elected = h.wait_elected("web", None).await;
        let entry = second
            .kv_entry(&h.key("web"))
            .expect("the key is in the second Consul");
        assert_eq!(entry.session.as_deref(), Some(elected.session.as_str()));
        assert_eq!(entry.lock_index, elected.token);
        assert!(
            h.emu().kv_entry(&h.key("web")).is_none(),
            "not in the operator's Consul"
        );

        // A tokenSecretRef whose Secret opted in: that token, at the other address.
        h.token_secret("tenant-token", TENANT_TOKEN, "api").await;
        let mut api = elsewhere_as_api(&second.url());
        api["consul"]["tokenSecretRef"] = json!({"name": "tenant-token", "key": "token"});
        h.election("api", api).await;
        h.wait_status("api", |le| status_leader(le).is_some()).await;
        let le = h.elections().get("api").await.expect("election");
        assert!(has_condition(&le, "SpecValid", "True"));

        let seen = second.stats();
        assert_eq!(
            seen.requests_with_token(OPERATOR_TOKEN),
            0,
            "the operator's token reached another Consul: {seen:?}"
        );
        assert!(seen.requests_with_token("") > 0, "{seen:?}");
        assert!(seen.requests_with_token(TENANT_TOKEN) > 0, "{seen:?}");
        assert_eq!(
            seen.requests_by_token.len(),
            2,
            "only no token and the tenant's: {seen:?}"
        );

        // Once no election uses the second Consul, the operator closes its connections.
        for name in ["web", "api"] {
            h.elections()
                .delete(name, &DeleteParams::default())
                .await
                .expect("delete election");
        }
        let closed = h
            .poll_until(SOON, || second.stats().connections_open == 0)
            .await;
        assert!(
            closed,
            "connections to an address no election uses stay open: {:?}",
            second.stats()
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_key_is_out_of_reach_of_the_operators_token() {
    with_namespace("sec-keys", |admin, ns| async move {
        let h = harness(admin, ns, Vec::new(), false).await;
        // Another tenant's lock, held by its own session, and a key outside elector/.
        let victim_key = "elector/victim/web/leader";
        let victim = h.app_session("victim", "15s").await;
        assert!(h.app_acquire(victim_key, &victim, "{}").await);
        let before = h.emu().kv_entry(victim_key).expect("victim key");
        h.emu().reset_stats();
        for (name, key) in [("web", victim_key), ("api", "service/web/leader")] {
            let mut spec = elsewhere_as_api(&h.emu().url());
            spec["key"] = json!(key);
            if name == "web" {
                spec["labels"] = json!({"key": ROLE});
            }
            h.election(name, spec).await;
            let message = refused(&h, name).await;
            assert!(
                message.contains("spec.key")
                    && message.contains(&format!("elector/{}/", h.ns))
                    && message.contains("tokenSecretRef"),
                "{message}"
            );
            h.touch_and_wait_reconcile(name).await;
        }
        assert_eq!(
            h.emu().kv_entry(victim_key),
            Some(before),
            "the victim's lock is untouched"
        );
        assert!(h.emu().kv_entry("service/web/leader").is_none());
        let stats = h.emu().stats();
        assert_eq!(
            stats.requests_to("session.create") + stats.requests_to("kv.put"),
            0,
            "the operator wrote to Consul: {stats:?}"
        );
        h.finish().await;
    })
    .await;
}

/// `spec.consul.datacenter` with the operator's own token: only the operator's datacenter and
/// those its admin allowed (`--consul-allowed-datacenters`; the harness' operator names no
/// datacenter of its own, so every named one needs the list). With a token of the election's
/// own, any datacenter: Consul's ACLs decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datacenter_the_admin_did_not_allow_is_refused_for_the_operators_token() {
    with_namespace("sec-dc", |admin, ns| async move {
        let h = harness(admin, ns, Vec::new(), true).await;
        let mut web = elsewhere(&h.emu().url());
        web["consul"] = json!({"datacenter": "dc1"});
        h.election("web", web).await;
        let message = refused(&h, "web").await;
        assert!(
            message.contains("spec.consul.datacenter")
                && message.contains("--consul-allowed-datacenters")
                && message.contains("\"dc1\""),
            "{message}"
        );
        let notes = h.wait_event("web", "InvalidSpec").await;
        assert!(notes.iter().any(|n| n.contains("spec.consul.datacenter")));
        assert!(h.emu().kv_entry(&h.key("web")).is_none());

        // The same datacenter with a token of the election's own.
        h.token_secret("tenant-token", TENANT_TOKEN, "api").await;
        let mut api = elsewhere_as_api(&h.emu().url());
        api["consul"] = json!({
            "datacenter": "dc1",
            "tokenSecretRef": {"name": "tenant-token", "key": "token"},
        });
        h.election("api", api).await;
        h.wait_status("api", |le| status_leader(le).is_some()).await;
        let le = h.elections().get("api").await.expect("election");
        assert!(has_condition(&le, "SpecValid", "True"));
        assert!(h.emu().stats().requests_with_token(TENANT_TOKEN) > 0);
        assert!(
            h.recorder
                .versions()
                .iter()
                .all(|v| !v.labels.contains_key(ROLE)),
            "no pod was ever labelled by web"
        );
        h.finish().await;
    })
    .await;
}

/// `spec.consul.namespace` and `.partition` (Consul Enterprise's) with the operator's own
/// token: only the operator's own (the harness' operator names none, so any is refused). With a
/// token of the election's own they go with the election's requests; Consul CE (the emulator
/// answers as it does) refuses them, and the election says so rather than electing in the
/// default namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consul_namespace_is_the_operators_own_or_a_tenants_and_consul_ce_refuses_it() {
    with_namespace("sec-ns", |admin, ns| async move {
        let h = harness(admin, ns, Vec::new(), true).await;
        let mut web = elsewhere(&h.emu().url());
        web["consul"] = json!({"namespace": "team-a"});
        h.election("web", web).await;
        let message = refused(&h, "web").await;
        assert!(
            message.contains("spec.consul.namespace") && message.contains("tokenSecretRef"),
            "{message}"
        );

        h.token_secret("tenant-token", TENANT_TOKEN, "api").await;
        let mut api = elsewhere_as_api(&h.emu().url());
        api["consul"] = json!({
            "namespace": "team-a",
            "partition": "east",
            "tokenSecretRef": {"name": "tenant-token", "key": "token"},
        });
        h.election("api", api).await;
        let le = h
            .wait_status("api", |le| {
                condition(le, "ConsulAvailable").is_some_and(|c| c.reason == "EnterpriseOnly")
            })
            .await;
        let available = condition(&le, "ConsulAvailable").expect("ConsulAvailable");
        assert_eq!(available.status, "False");
        assert!(
            available
                .message
                .contains("Namespaces are a Consul Enterprise feature"),
            "{}",
            available.message
        );
        assert!(has_condition(&le, "SpecValid", "True"));
        assert!(h.emu().kv_entry(&h.key("api")).is_none());
        assert!(h.emu().sessions().is_empty(), "no session anywhere");
        assert!(
            h.recorder
                .versions()
                .iter()
                .all(|v| v.labels.get(API_ROLE).map(String::as_str) != Some("leader")),
            "no pod was ever labelled leader by api"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datacenter_the_admin_allowed_may_be_used_with_the_operators_token() {
    with_namespace("sec-dc-allowed", |admin, ns| async move {
        let consul = OperatorConsul {
            allowed_datacenters: vec!["dc2".to_owned(), "dc1".to_owned()],
            ..OperatorConsul::default()
        };
        let h = harness_with(admin, ns, consul, false).await;
        let mut web = elsewhere(&h.emu().url());
        web["consul"] = json!({"datacenter": "dc1"});
        h.election("web", web).await;
        let elected = h.wait_elected("web", None).await;
        let le = h.elections().get("web").await.expect("election");
        assert!(has_condition(&le, "SpecValid", "True"));
        let entry = h.emu().kv_entry(&h.key("web")).expect("the key in dc1");
        assert_eq!(entry.session.as_deref(), Some(elected.session.as_str()));
        assert!(h.emu().stats().requests_with_token(OPERATOR_TOKEN) > 0);
        h.finish().await;
    })
    .await;
}

/// Eager adoption reaches every Consul the elections use: after a restart, the session an
/// election holds on an allowed second Consul is renewed before the first reconcile has
/// finished (key reads there are slowed, so a reconcile-by-reconcile adoption would be late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_adopts_the_sessions_on_every_allowed_consul_before_reconciling() {
    with_namespace("sec-adopt", |admin, ns| async move {
        let second = other_consul().await;
        let mut h = harness(admin, ns, vec![second.url()], false).await;
        h.election("web", json!({"selector": {"matchLabels": {"app": "web"}}}))
            .await;
        h.election("api", elsewhere_as_api(&second.url())).await;
        let web = h.wait_elected("web", None).await;
        let api = h
            .wait_status("api", |le| {
                le.status
                    .as_ref()
                    .and_then(|s| s.leader.as_ref()?.session_id.clone())
                    .is_some()
            })
            .await
            .status
            .and_then(|s| s.leader)
            .expect("api leads");
        let api_session = api.session_id.clone().expect("session");
        let deadline = second
            .session(&api_session)
            .and_then(|s| s.deadline)
            .expect("a session with a TTL");

        let slow = second.add_fault(testkit::consul::Fault::always(
            testkit::consul::Endpoint::Kv,
            testkit::consul::FaultAction::Latency(Duration::from_millis(1500)),
        ));
        h.kill_operator().await;
        h.start_operator().await;
        let renewed_at_first_reconcile = std::cell::Cell::new(None);
        let reconciled = h
            .poll_until(SOON, || {
                if h.reconciles() == 0 {
                    return false;
                }
                let renewed = second
                    .session(&api_session)
                    .and_then(|s| s.deadline)
                    .is_some_and(|d| d > deadline);
                renewed_at_first_reconcile.set(Some(renewed));
                true
            })
            .await;
        assert!(reconciled, "the restarted operator reconciled");
        assert_eq!(
            renewed_at_first_reconcile.get(),
            Some(true),
            "the session on the second Consul was not renewed before the first reconcile"
        );
        second.remove_fault(slow);
        assert_eq!(h.wait_elected("web", None).await, web);
        h.touch_and_wait_reconcile("api").await;
        let after = h.status("api").await;
        assert_eq!(
            after.leader.and_then(|l| l.session_id),
            Some(api_session),
            "the same session leads"
        );
        h.finish().await;
    })
    .await;
}

/// Every read outside a watch is bounded: a token Secret GET that never answers (a dead
/// pooled connection) fails after the read timeout, and the retried reconcile elects. Without
/// the bound the reconcile, and with it everything the election needs, would wait for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_read_that_never_answers_does_not_hang_the_election() {
    with_namespace("sec-hung-read", |admin, ns| async move {
        let h = harness(admin, ns, Vec::new(), true).await;
        h.token_secret("tenant-token", TENANT_TOKEN, "web").await;
        h.kube_faults.add(
            KubeFault::new(KubeFaultAction::Latency(Duration::from_secs(3600)))
                .resource("secrets")
                .times(1),
        );
        let mut web = json!({"selector": {"matchLabels": {"app": "web"}}});
        web["consul"] = json!({"tokenSecretRef": {"name": "tenant-token", "key": "token"}});
        h.election("web", web).await;
        h.wait_elected_within("web", None, READ_TIMEOUT + SOON)
            .await;
        h.finish().await;
    })
    .await;
}

/// Rule 2 does not wait for the inputs a reconcile gathers: while every token Secret GET hangs
/// (each reconcile fails after the read timeout, and the next one hangs again), the key is
/// deleted from outside, and the leader label goes at once rather than never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_secret_read_does_not_hold_back_the_fence() {
    let hang = KubeFaultAction::Latency(Duration::from_secs(3600));
    fenced_while_the_secret_fails("sec-hung-fence", hang).await;
}

/// As [`a_hung_secret_read_does_not_hold_back_the_fence`], with Secret GETs that fail at once:
/// each reconcile fails before it plans, and still fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_secret_read_does_not_hold_back_the_fence() {
    let fail = KubeFaultAction::Status {
        code: 500,
        reason: "InternalError".into(),
        message: "etcd is unhappy".into(),
        retry_after: None,
    };
    fenced_while_the_secret_fails("sec-fail-fence", fail).await;
}

/// Elects with a token Secret, makes every Secret GET meet `fault`, deletes the key from
/// outside and waits for the leader label to go, well within the read timeout.
async fn fenced_while_the_secret_fails(prefix: &str, fault: KubeFaultAction) {
    with_namespace(prefix, |admin, ns| async move {
        let h = harness(admin, ns, Vec::new(), true).await;
        h.token_secret("tenant-token", TENANT_TOKEN, "web").await;
        let mut web = json!({"selector": {"matchLabels": {"app": "web"}}});
        web["consul"] = json!({"tokenSecretRef": {"name": "tenant-token", "key": "token"}});
        h.election("web", web).await;
        let first = h.wait_elected("web", None).await;
        h.kube_faults.add(KubeFault::new(fault).resource("secrets"));
        // A reconcile now waits on (or fails at) the Secret, as every later one will.
        h.touch("web").await;
        let deleted = std::time::Instant::now();
        h.app_delete_key(&h.key("web")).await;
        let stayed = h
            .leader_label_gone_after(&first.pod, deleted, READ_TIMEOUT * 3)
            .await;
        eprintln!("Secret reads failing, key deleted: leader label removed after {stayed:?}");
        assert!(
            stayed < READ_TIMEOUT,
            "the label stayed {stayed:?} after the key was deleted, waiting for a Secret read"
        );
        h.finish().await;
    })
    .await;
}
