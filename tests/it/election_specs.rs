//! What users write (docs/design.md section 1): conflicting elections, several elections on the
//! same pods under different label keys, specs that cannot be acted on (and their repair),
//! token Secrets, readiness requirements and selector changes.

use crate::harness;

use std::time::Duration;

use consul_elector::crd::{
    FENCING_TOKEN_ANNOTATION, LEADER_SINCE_ANNOTATION, label_token_annotation,
};
use harness::{
    Harness, HarnessOptions, ROLE, SOON, condition, has_condition, phase, role_in, status_leader,
    with_role,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::kube_faults::{self, KubeFault, Verb};
use testkit::pods::SimulatorOptions;

const ELECTION_ANNOTATION: &str = "elector.dev/election";
const SECRET_OPT_IN: &str = consul_elector::crd::SECRET_ALLOWED_ELECTIONS_ANNOTATION;

/// How often the operator read Secret `consul-token`: (metadata only, with data).
fn secret_reads(h: &Harness) -> (usize, usize) {
    let reads: Vec<bool> = h
        .kube_faults
        .seen()
        .into_iter()
        .filter(|r| {
            r.resource.as_deref() == Some("secrets") && r.name.as_deref() == Some("consul-token")
        })
        .map(|r| r.metadata_only)
        .collect();
    let metadata = reads.iter().filter(|m| **m).count();
    (metadata, reads.len() - metadata)
}
const OTHER_ROLE: &str = "example.com/role";

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

/// Whether any recorded version of any pod ever carried `elector.dev/election=<name>`.
fn ever_labelled_by(h: &Harness, name: &str) -> bool {
    h.recorder
        .versions()
        .iter()
        .any(|v| v.annotations.get(ELECTION_ANNOTATION).map(String::as_str) == Some(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_younger_of_two_conflicting_elections_writes_nothing() {
    with_namespace("sp-conflict", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("older", web()).await;
        let first = h.wait_elected("older", None).await;

        h.election("younger", web()).await;
        let le = h
            .wait_status("younger", |le| phase(le).as_deref() == Some("Conflict"))
            .await;
        let conflict = condition(&le, "Exclusive").expect("Exclusive condition");
        assert_eq!(
            (conflict.status.as_str(), conflict.reason.as_str()),
            ("False", "Conflict")
        );
        assert!(conflict.message.contains("older"), "{}", conflict.message);
        assert!(
            condition(&le, "Conflict").is_none(),
            "no condition of the old polarity"
        );
        let notes = h.wait_event("younger", "Conflict").await;
        assert!(notes.iter().any(|n| n.contains("older")), "{notes:?}");

        // Nothing of its own: no key, no session, no pod it labelled; the older one is
        // undisturbed.
        assert!(h.emu().kv_entry(&h.key("younger")).is_none());
        let names = h.session_names().await;
        assert!(names.iter().all(|n| !n.contains("/younger/")), "{names:?}");
        assert!(!ever_labelled_by(&h, "younger"));
        assert!(le.status.as_ref().and_then(|s| s.leader.as_ref()).is_none());
        let now = h.wait_elected("older", None).await;
        assert_eq!(now, first);

        // The older one goes: the younger one takes over.
        h.elections()
            .delete("older", &Default::default())
            .await
            .expect("delete older");
        let le = h
            .wait_status("younger", |le| phase(le).as_deref() == Some("Elected"))
            .await;
        assert!(has_condition(&le, "Exclusive", "True"));
        h.wait_elected("younger", None).await;
        h.finish().await;
    })
    .await;
}

/// The role `pod` has under label key `key`.
fn role_under<'a>(
    pods: &'a std::collections::BTreeMap<String, testkit::recorder::PodVersion>,
    pod: &str,
    key: &str,
) -> Option<&'a str> {
    pods.get(pod)
        .and_then(|v| v.labels.get(key))
        .map(String::as_str)
}

/// Asserts that no label or annotation of any pod changes for `window` (the elections do
/// not fight over the pods they share).
async fn quiet(h: &Harness, window: Duration) {
    type Marks = std::collections::BTreeMap<
        String,
        (
            std::collections::BTreeMap<String, String>,
            std::collections::BTreeMap<String, String>,
        ),
    >;
    let marks =
        |pods: &std::collections::BTreeMap<String, testkit::recorder::PodVersion>| -> Marks {
            pods.iter()
                .map(|(n, v)| (n.clone(), (v.labels.clone(), v.annotations.clone())))
                .collect()
        };
    let before = marks(&h.current());
    let changed = h.pods_become(window, |pods| marks(pods) != before).await;
    assert!(
        !changed,
        "the pods' labels or annotations keep changing: before {before:#?}, now {:#?}",
        marks(&h.current())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_with_different_label_keys_share_pods() {
    with_namespace("sp-twokeys", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        // `primary` tolerates a NotReady leader for an hour (used below to split leaders).
        h.election(
            "primary",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "failover": {"delay": "1h"},
            }),
        )
        .await;
        let primary = h.wait_elected("primary", None).await;
        h.election(
            "secondary",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "labels": {"key": OTHER_ROLE},
            }),
        )
        .await;

        // Both elect the newest pod: one pod leads both, and they leave each other alone.
        let le = h
            .wait_status("secondary", |le| phase(le).as_deref() == Some("Elected"))
            .await;
        assert!(has_condition(&le, "Exclusive", "True"));
        let both = status_leader(&le).expect("secondary leader");
        assert_eq!(
            both, primary.pod,
            "the same successor rule picks the same pod"
        );
        let p = primary.pod.clone();
        let first_token = primary.token.to_string();
        h.wait_pods(SOON, "one pod leads both elections", |pods| {
            // The pod carries each one's token beside its label.
            let token_of = |key: &str| pods[&p].annotations.get(&label_token_annotation(key));
            role_in(pods, &p) == Some("leader")
                && role_under(pods, &p, OTHER_ROLE) == Some("leader")
                && token_of(ROLE) == Some(&first_token)
                && token_of(OTHER_ROLE).map(String::as_str) == Some("1")
                && with_role(pods, "follower").len() == 2
                && pods.values().all(|v| v.labels.contains_key(OTHER_ROLE))
        })
        .await;
        quiet(&h, Duration::from_secs(3)).await;
        let now = h.wait_elected("primary", None).await;
        assert_eq!(now, primary, "primary's token and session never moved");
        let secondary_status = h.status("secondary").await;
        assert_eq!(secondary_status.fencing_token, Some(1));
        assert_eq!(secondary_status.transitions, 0);

        // Split them: the shared leader goes NotReady; `primary` keeps it (1 h delay),
        // `secondary` moves to another pod.
        h.sim.set_ready(&primary.pod, false).await;
        let le = h
            .wait_status("secondary", |le| {
                status_leader(le).is_some_and(|l| l != primary.pod)
                    && phase(le).as_deref() == Some("Elected")
            })
            .await;
        let secondary = status_leader(&le).expect("secondary leader");
        let secondary_token = le.status.as_ref().and_then(|s| s.fencing_token);
        h.sim.set_ready(&primary.pod, true).await;

        // One pod leads `primary` and follows `secondary`, another the other way round, and
        // each leader carries its own election's token.
        let (p, s) = (primary.pod.clone(), secondary.clone());
        let p_token = primary.token.to_string();
        let s_token = secondary_token.expect("token").to_string();
        h.wait_pods(SOON, "leaders split between the elections", |pods| {
            let annotation = |pod: &str, a: &str| pods.get(pod).and_then(|v| v.annotations.get(a));
            role_in(pods, &p) == Some("leader")
                && role_under(pods, &p, OTHER_ROLE) == Some("follower")
                && role_in(pods, &s) == Some("follower")
                && role_under(pods, &s, OTHER_ROLE) == Some("leader")
                && annotation(&p, FENCING_TOKEN_ANNOTATION) == Some(&p_token)
                && annotation(&p, ELECTION_ANNOTATION).map(String::as_str) == Some("primary")
                && annotation(&s, FENCING_TOKEN_ANNOTATION) == Some(&s_token)
                && annotation(&s, ELECTION_ANNOTATION).map(String::as_str) == Some("secondary")
                && annotation(&p, &label_token_annotation(ROLE)) == Some(&p_token)
                && annotation(&p, &label_token_annotation(OTHER_ROLE)).is_none()
                && annotation(&s, &label_token_annotation(OTHER_ROLE)) == Some(&s_token)
                && annotation(&s, &label_token_annotation(ROLE)).is_none()
        })
        .await;
        quiet(&h, Duration::from_secs(3)).await;
        let now = h.wait_elected("primary", None).await;
        assert_eq!(now, primary, "primary's token and session never moved");

        // Deleting `secondary` removes its label key everywhere and leaves `primary` intact.
        h.elections()
            .delete("secondary", &Default::default())
            .await
            .expect("delete secondary");
        let p = primary.pod.clone();
        h.wait_pods(SOON, "secondary's labels gone", |pods| {
            pods.values().all(|v| !v.labels.contains_key(OTHER_ROLE))
                && with_role(pods, "leader") == vec![p.clone()]
                && with_role(pods, "follower").len() == 2
                && pods.values().all(|v| {
                    v.annotations.get(ELECTION_ANNOTATION).map(String::as_str) == Some("primary")
                })
        })
        .await;
        let now = h.wait_elected("primary", None).await;
        assert_eq!(now, primary);
        h.recorder.assert_never_two(OTHER_ROLE, "leader");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_reported_once_and_fixing_it_recovers() {
    with_namespace("sp-invalid", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        // Every server admits this: the schema's pattern allows any port, only the
        // operator's parser knows that 99999 is none.
        h.election(
            "web",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "consul": {"address": "consul.invalid:99999"},
            }),
        )
        .await;
        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert!(
            valid.message.contains("spec.consul.address"),
            "{}",
            valid.message
        );
        h.wait_event("web", "InvalidSpec").await;

        // No retry storm: over a few seconds, hardly any reconcile and still one event.
        let reconciles = h.reconciles();
        let _ = h
            .pods_become(Duration::from_secs(3), |pods| {
                pods.values().any(|p| p.labels.contains_key(ROLE))
            })
            .await;
        let more = h.reconciles() - reconciles;
        assert!(more <= 2, "{more} reconciles of an invalid election in 3 s");
        let (events, notes) = h.events("web", "InvalidSpec").await;
        assert_eq!(events, 1, "{notes:?}");
        // Nothing written.
        assert!(!ever_labelled_by(&h, "web"));
        assert!(h.emu().kv_entry(&h.key("web")).is_none());
        assert_eq!(h.emu().stats().requests_to("session.create"), 0);

        // Fixing the spec recovers at once.
        h.patch_spec("web", json!({"consul": null})).await;
        h.wait_elected("web", None).await;
        let le = h.elections().get("web").await.expect("election");
        assert!(has_condition(&le, "SpecValid", "True"));
        h.finish().await;
    })
    .await;
}

/// A TTL outside Consul's range: a server that enforces the CRD's CEL rules (1.25 and later)
/// refuses it at admission; an older one admits it and the operator reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_out_of_range_is_refused_at_admission_or_reported_invalid() {
    with_namespace("sp-ttl", |admin, ns| async move {
        let info = admin.apiserver_version().await.expect("server version");
        let version = testkit::version::Version::parse(&info.git_version).expect("version");
        let enforces_cel = version.at_least(1, 25);
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 1).await;
        let le: consul_elector::crd::LeaderElection = serde_json::from_value(json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": h.ns},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "session": {"ttl": "5s"}},
        }))
        .expect("election");
        let created = h.elections().create(&PostParams::default(), &le).await;
        if enforces_cel {
            match created {
                Err(kube::Error::Api(status)) => {
                    assert_eq!(status.code, 422, "{status:?}");
                    assert!(status.message.contains("ttl"), "{}", status.message);
                }
                other => panic!("Kubernetes {version:?} admitted a 5s TTL: {other:?}"),
            }
            return;
        }
        created.expect("a server before 1.25 admits what only CEL refuses");
        h.start_operator().await;
        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        assert!(
            valid.message.contains("spec.session.ttl"),
            "{}",
            valid.message
        );
        h.finish().await;
    })
    .await;
}

async fn missing_token_secret(prefix: &str, secret_access: bool) {
    with_namespace(prefix, |admin, ns| async move {
        let mut h = Harness::with_options(
            admin,
            ns,
            HarnessOptions {
                secret_access,
                ..HarnessOptions::default()
            },
        )
        .await;
        h.deployment("web", 2).await;
        h.start_operator().await;
        h.election(
            "web",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "consul": {"tokenSecretRef": {"name": "consul-token", "key": "token"}},
            }),
        )
        .await;
        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        assert_eq!(valid.status, "False");
        let expected = if secret_access {
            "Secret"
        } else {
            "may not read Secret"
        };
        assert!(
            valid.message.contains("spec.consul.tokenSecretRef")
                && valid.message.contains(expected)
                && valid.message.contains("consul-token"),
            "{}",
            valid.message
        );
        if !secret_access {
            assert!(
                valid.message.contains("rbac.secretAccess"),
                "{}",
                valid.message
            );
        } else {
            assert!(valid.message.contains("not found"), "{}", valid.message);
        }
        let notes = h.wait_event("web", "InvalidSpec").await;
        assert!(
            notes.iter().any(|n| n.contains("consul-token")),
            "{notes:?}"
        );
        assert!(!ever_labelled_by(&h, "web"));

        // The Secret appears, without the owner's opt-in. The operator watches no Secrets
        // (it may only `get` them), so it learns about it on its next look (the requeue of
        // invalid elections), or at once when the election is touched, as `kubectl annotate`
        // does.
        let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), &h.ns);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "consul-token", "annotations": {SECRET_OPT_IN: "api"}},
            "stringData": {"token": "any-token-the-emulator-accepts"},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
        h.touch_and_wait_reconcile("web").await;
        let le = h.elections().get("web").await.expect("election");
        assert_eq!(phase(&le).as_deref(), Some("Invalid"));
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        if secret_access {
            // It names another election only: refused, and its data was never asked for.
            assert!(
                valid.message.contains("does not allow election \"web\"")
                    && valid.message.contains(SECRET_OPT_IN),
                "{}",
                valid.message
            );
            let (metadata, full) = secret_reads(&h);
            assert!(
                metadata >= 1 && full == 0,
                "metadata only while the Secret has not opted in: {metadata} metadata, {full} full reads"
            );
            let patch = json!({"metadata": {"annotations": {SECRET_OPT_IN: "api, web"}}});
            secrets
                .patch("consul-token", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("annotate secret");
            h.touch("web").await;
            h.wait_elected("web", None).await;
            let le = h.elections().get("web").await.expect("election");
            assert!(has_condition(&le, "SpecValid", "True"));
            let (metadata, full) = secret_reads(&h);
            assert!(metadata >= 2 && full >= 1, "{metadata} metadata, {full} full reads");
        } else {
            // Without the chart's rbac.secretAccess it stays Invalid, with the same advice.
            assert!(valid.message.contains("rbac.secretAccess"), "{}", valid.message);
            let (events, _) = h.events("web", "InvalidSpec").await;
            assert_eq!(events, 1, "the unchanged problem is not reported again");
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_secret_is_used_only_once_it_exists_and_opts_in() {
    missing_token_secret("sp-secret", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_secret_access_the_token_secret_is_reported_unreadable() {
    missing_token_secret("sp-nosecret", false).await;
}

/// A harness whose simulated pods stay NotReady until told otherwise, with a Deployment `web`
/// of `replicas` such pods (not waited for: it never becomes ready).
async fn never_ready_web(admin: kube::Client, ns: String, replicas: i32) -> Harness {
    let h = Harness::with_options(
        admin,
        ns,
        HarnessOptions {
            sim: SimulatorOptions {
                start_ready: false,
                max_grace: Some(Duration::from_secs(2)),
                ..SimulatorOptions::default()
            },
            ..HarnessOptions::default()
        },
    )
    .await;
    let labels = std::collections::BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    testkit::pods::create_deployment(&h.admin, &h.ns, "web", replicas, labels)
        .await
        .expect("deployment");
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_never_become_ready_elect_nobody_until_one_does() {
    with_namespace("sp-notready", |admin, ns| async move {
        let mut h = never_ready_web(admin, ns, 3).await;
        h.start_operator().await;
        h.election("web", web()).await;
        let le = h
            .wait_status("web", |le| {
                phase(le).as_deref() == Some("Pending")
                    && le.status.as_ref().is_some_and(|s| {
                        s.candidates.len() == 3
                            && s.candidates
                                .iter()
                                .all(|c| !c.eligible && c.reason.as_deref() == Some("NotReady"))
                    })
            })
            .await;
        assert!(status_leader(&le).is_none());
        assert!(has_condition(&le, "LeaderElected", "False"));
        h.wait_pods(SOON, "three followers", |pods| {
            with_role(pods, "follower").len() == 3
        })
        .await;
        assert!(h.emu().kv_entry(&h.key("web")).is_none(), "no lock taken");

        let one = h.current().keys().next().cloned().expect("a pod");
        h.sim.set_ready(&one, true).await;
        let elected = h.wait_elected("web", None).await;
        assert_eq!(elected.pod, one);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_require_ready_a_not_ready_pod_can_lead() {
    with_namespace("sp-noready", |admin, ns| async move {
        let mut h = never_ready_web(admin, ns, 2).await;
        h.start_operator().await;
        h.election(
            "web",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "candidates": {"requireReady": false},
            }),
        )
        .await;
        let elected = h.wait_elected("web", None).await;
        let pods = h.current();
        assert!(!pods[&elected.pod].ready, "a NotReady pod leads");
        let le = h.elections().get("web").await.expect("election");
        let candidates = &le.status.as_ref().expect("status").candidates;
        assert!(candidates.iter().all(|c| c.eligible), "{candidates:?}");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_changes_unlabel_leavers_label_newcomers_and_replace_a_leaving_leader() {
    with_namespace("sp-selector", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        // Four bare pods: tier=a (a1, a2) and tier=b (b1, b2), all app=web.
        for (name, tier) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")] {
            h.bare_pod(name, &[("app", "web"), ("tier", tier)]).await;
        }
        h.wait_pods(SOON, "four Ready pods", |pods| {
            pods.len() == 4 && pods.values().all(|p| p.ready)
        })
        .await;
        h.start_operator().await;
        h.election(
            "web",
            json!({"selector": {"matchLabels": {"app": "web", "tier": "a"}}}),
        )
        .await;
        let first = h.wait_elected("web", None).await;
        assert!(first.pod.starts_with('a'));
        h.wait_pods(SOON, "a-pods labelled, b-pods untouched", |pods| {
            with_role(pods, "follower").len() == 1
                && ["b1", "b2"]
                    .iter()
                    .all(|b| !pods[*b].labels.contains_key(ROLE))
        })
        .await;

        // The selection moves to tier b: the a-pods (the leader among them) lose everything,
        // the b-pods are labelled, one of them leads.
        h.patch_spec(
            "web",
            json!({"selector": {"matchLabels": {"app": "web", "tier": "b"}}}),
        )
        .await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert!(second.pod.starts_with('b'));
        assert!(second.token > first.token);
        h.wait_pods(SOON, "a-pods cleaned, b-pods labelled", |pods| {
            ["a1", "a2"].iter().all(|a| {
                let p = &pods[*a];
                !p.labels.contains_key(ROLE)
                    && !p.annotations.contains_key(FENCING_TOKEN_ANNOTATION)
                    && !p.annotations.contains_key(LEADER_SINCE_ANNOTATION)
                    && !p.annotations.contains_key(ELECTION_ANNOTATION)
            }) && with_role(pods, "follower").len() == 1
        })
        .await;

        // Widened to every app=web pod: the leader stays, the a-pods become followers.
        h.patch_spec("web", json!({"selector": {"matchLabels": {"tier": null}}}))
            .await;
        h.wait_pods(SOON, "three followers", |pods| {
            with_role(pods, "follower").len() == 3
        })
        .await;
        let now = h.wait_elected("web", None).await;
        assert_eq!(now, second, "widening the selection moves nobody");

        // Narrowed to nothing: nobody is labelled, the lock is released.
        h.patch_spec(
            "web",
            json!({"selector": {"matchLabels": {"app": "nothing"}}}),
        )
        .await;
        h.wait_pods(SOON, "every pod cleaned", |pods| {
            pods.values().all(|p| {
                !p.labels.contains_key(ROLE) && !p.annotations.contains_key(ELECTION_ANNOTATION)
            })
        })
        .await;
        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Pending"))
            .await;
        assert!(le.status.as_ref().is_some_and(|s| s.candidates.is_empty()));
        assert!(
            h.emu()
                .kv_entry(&h.key("web"))
                .is_none_or(|e| e.session.is_none()),
            "the lock is released"
        );
        h.finish().await;
    })
    .await;
}

/// Three elections over the same pods: `other-key` (another label key) owns the annotations
/// of every pod, `older` and `younger` write the default key, and `younger` yields to
/// `older`. The labels `older` writes carry `other-key`'s annotations, so the pods alone do not
/// say which of the two wrote them: the yielding one must leave them to the one that acts
/// (before, it took them off and `older` wrote them again, without end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yielding_election_leaves_the_labels_of_the_one_that_acts_on_pods_a_third_one_owns() {
    with_namespace("sp-three", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election(
            "other-key",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "labels": {"key": OTHER_ROLE},
            }),
        )
        .await;
        h.wait_pods(SOON, "other-key labels and owns every pod", |pods| {
            pods.len() == 3
                && pods.values().all(|v| {
                    v.labels.contains_key(OTHER_ROLE)
                        && v.annotations.get(ELECTION_ANNOTATION).map(String::as_str)
                            == Some("other-key")
                })
        })
        .await;
        h.election("older", web()).await;
        let older = h.wait_elected("older", None).await;
        h.wait_pods(SOON, "older labels every pod", |pods| {
            pods.values().all(|v| v.labels.contains_key(ROLE))
        })
        .await;

        h.election("younger", web()).await;
        h.wait_status("younger", |le| phase(le).as_deref() == Some("Conflict"))
            .await;
        quiet(&h, Duration::from_secs(3)).await;
        let p = older.pod.clone();
        h.wait_pods(SOON, "older's labels stay", |pods| {
            with_role(pods, "leader") == vec![p.clone()] && with_role(pods, "follower").len() == 2
        })
        .await;
        assert_eq!(h.wait_elected("older", None).await, older);
        assert!(!ever_labelled_by(&h, "younger"));
        h.finish().await;
    })
    .await;
}

/// An election `older` whose selector (`tier=shared`) matches no pod yet, and an election
/// `younger` over the web pods that elected a leader: no conflict until a pod gets the tier.
async fn older_idle_and_younger_leading(
    admin: kube::Client,
    ns: String,
) -> (Harness, harness::Elected) {
    let mut h = Harness::new(admin, ns).await;
    h.deployment("web", 3).await;
    h.start_operator().await;
    h.election(
        "older",
        json!({"selector": {"matchLabels": {"app": "web", "tier": "shared"}}}),
    )
    .await;
    h.election("younger", web()).await;
    let led = h.wait_elected("younger", None).await;
    (h, led)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_that_becomes_the_younger_while_leading_yields_everything() {
    with_namespace("sp-yield", |admin, ns| async move {
        let (h, led) = older_idle_and_younger_leading(admin, ns).await;
        let younger_key = h.key("younger");

        // The younger one's leader now matches the older one's selector too.
        h.set_pod_label(&led.pod, "tier", Some("shared")).await;
        let le = h
            .wait_status("younger", |le| phase(le).as_deref() == Some("Conflict"))
            .await;
        assert!(has_condition(&le, "Exclusive", "False"));

        // It lets go of everything: its session, its key, its labels and annotations.
        let let_go = h
            .poll_until(SOON, || {
                h.emu().session(&led.session).is_none()
                    && h.emu()
                        .kv_entry(&younger_key)
                        .is_none_or(|e| e.session.is_none())
            })
            .await;
        assert!(
            let_go,
            "the younger election still holds its lock: {:?}",
            h.emu().kv_entry(&younger_key)
        );
        let shared = led.pod.clone();
        h.wait_pods(SOON, "only the older election's labels left", |pods| {
            pods.values().all(|p| {
                p.annotations.get(ELECTION_ANNOTATION).map(String::as_str) != Some("younger")
            }) && pods
                .iter()
                .all(|(name, p)| *name == shared || !p.labels.contains_key(ROLE))
        })
        .await;
        // The older election leads its one pod.
        let older = h.wait_elected("older", None).await;
        assert_eq!(older.pod, led.pod);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_created_in_the_same_second_are_ordered_by_name() {
    with_namespace("sp-tie", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        // `b-first` is created, and leads, before `a-second` exists; when both carry the
        // same creationTimestamp (one-second resolution), `a-second` counts as the older.
        let mut same_second = false;
        for _ in 0..10 {
            // Start just after a second begins (the API server runs on this machine's clock),
            // so the whole second is left for the election.
            let into_second = jiff::Timestamp::now().subsec_nanosecond();
            let to_next = 1_000_000_000 - u64::try_from(into_second).unwrap_or(0);
            tokio::time::sleep(Duration::from_nanos(to_next) + Duration::from_millis(5)).await;
            let b = h.election("b-first", web()).await;
            h.wait_elected("b-first", None).await;
            let a = h.election("a-second", web()).await;
            if a.metadata.creation_timestamp == b.metadata.creation_timestamp {
                same_second = true;
                break;
            }
            // Not in one second: start over.
            for name in ["a-second", "b-first"] {
                let le = h.elections().get(name).await.expect("election");
                let uid = le.metadata.uid.clone().expect("uid");
                h.elections()
                    .delete(name, &Default::default())
                    .await
                    .expect("delete");
                tokio::time::timeout(
                    SOON,
                    kube::runtime::wait::await_condition(
                        h.elections(),
                        name,
                        kube::runtime::conditions::is_deleted(&uid),
                    ),
                )
                .await
                .expect("deleted in time")
                .expect("watch");
            }
        }
        assert!(same_second, "never created two elections in one second");

        let le = h
            .wait_status("b-first", |le| phase(le).as_deref() == Some("Conflict"))
            .await;
        let conflict = condition(&le, "Exclusive").expect("Exclusive condition");
        assert_eq!(conflict.status, "False");
        assert!(
            conflict.message.contains("a-second"),
            "{}",
            conflict.message
        );
        let winner = h.wait_elected("a-second", None).await;
        h.wait_pods(SOON, "b-first withdrew from every pod", |pods| {
            pods.values().all(|p| {
                p.annotations.get(ELECTION_ANNOTATION).map(String::as_str) != Some("b-first")
            })
        })
        .await;
        let b_key = h.key("b-first");
        assert!(
            h.emu().kv_entry(&b_key).is_none_or(|e| e.session.is_none()),
            "b-first still holds its key"
        );
        // The order does not flip afterwards: every later reconcile agrees.
        h.touch_and_wait_reconcile("b-first").await;
        h.touch_and_wait_reconcile("a-second").await;
        let le = h.elections().get("b-first").await.expect("b-first");
        assert_eq!(phase(&le).as_deref(), Some("Conflict"));
        assert_eq!(h.wait_elected("a-second", None).await, winner);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_election_waits_for_the_younger_leader_label_to_go() {
    with_namespace("sp-yield-wait", |admin, ns| async move {
        let (h, led) = older_idle_and_younger_leading(admin, ns).await;
        // The younger election's leader is slow to lose its label (its patches hang 2 s)...
        h.kube_faults.add(
            KubeFault::new(kube_faults::FaultAction::Latency(Duration::from_secs(2)))
                .verb(Verb::Patch)
                .resource("pods")
                .name(led.pod.clone())
                .times(1),
        );
        // ...when one of its followers comes to match the older election's selector.
        let shared = h
            .current()
            .keys()
            .find(|n| **n != led.pod)
            .expect("a follower")
            .clone();
        h.set_pod_label(&shared, "tier", Some("shared")).await;
        let older = h.wait_elected("older", None).await;
        assert_eq!(older.pod, shared);
        assert!(
            !h.kube_faults.injected().is_empty(),
            "the younger leader's patch was delayed"
        );
        // finish: never two pods labelled leader, over the whole history.
        h.finish().await;
    })
    .await;
}

/// A Deployment `web` of 3 Ready pods labelled (and selected by) `app=web, tier=db`.
async fn web_tier_db(h: &Harness) {
    let labels = std::collections::BTreeMap::from([
        ("app".to_owned(), "web".to_owned()),
        ("tier".to_owned(), "db".to_owned()),
    ]);
    testkit::pods::create_deployment(&h.admin, &h.ns, "web", 3, labels)
        .await
        .expect("deployment");
    testkit::pods::wait_deployment_ready(&h.admin, &h.ns, "web", SOON)
        .await
        .expect("deployment ready");
}

/// The election of [`web_tier_db`]'s pods with label key `tier`, which their ReplicaSet selects.
fn tier_key() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}, "labels": {"key": "tier"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_key_the_pods_controller_selects_is_refused_until_it_changes() {
    with_namespace("sp-owner-key", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        web_tier_db(&h).await;
        let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
            Api::namespaced(h.admin.clone(), &h.ns);
        let owners = replica_sets.list(&Default::default()).await.expect("list");
        let [owner] = &owners.items[..] else {
            panic!("one ReplicaSet: {:?}", owners.items);
        };
        let owner = format!(
            "ReplicaSet {}/{}",
            h.ns,
            owner.metadata.name.as_deref().unwrap()
        );
        h.start_operator().await;
        h.election("web", tier_key()).await;

        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "LabelKeySelectedByOwner")
        );
        assert!(valid.message.contains("\"tier\""), "{}", valid.message);
        assert!(valid.message.contains(&owner), "{}", valid.message);
        assert!(has_condition(&le, "Ready", "False"));
        let notes = h.wait_event("web", "LabelKeySelectedByOwner").await;
        assert!(notes.iter().any(|n| n.contains(&owner)), "{notes:?}");

        // Nothing written: no pod ever lost `tier=db` (the ReplicaSet keeps its 3 pods), no
        // key, no session.
        assert!(!ever_labelled_by(&h, "web"));
        assert!(
            h.recorder
                .versions()
                .iter()
                .all(|v| v.labels.get("tier").map(String::as_str) == Some("db")),
            "a pod's tier label changed"
        );
        assert!(h.emu().kv_entry(&h.key("web")).is_none());
        assert_eq!(h.emu().stats().requests_to("session.create"), 0);

        // A key the ReplicaSet does not select: the election proceeds.
        h.patch_spec("web", json!({"labels": {"key": ROLE}})).await;
        h.wait_elected("web", None).await;
        let le = h.elections().get("web").await.expect("election");
        assert!(has_condition(&le, "SpecValid", "True"));
        assert_eq!(
            h.recorder.current().len(),
            3,
            "the ReplicaSet kept its pods"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_get_on_the_pods_controller_the_label_key_goes_unchecked() {
    with_namespace("sp-owner-forbidden", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        web_tier_db(&h).await;
        // An install whose role lacks `get` on ReplicaSets.
        h.kube_faults.add(
            KubeFault::new(kube_faults::FaultAction::status(
                403,
                "Forbidden",
                "replicasets.apps is forbidden",
            ))
            .verb(Verb::Get)
            .resource("replicasets"),
        );
        h.start_operator().await;
        h.election("web", web()).await;
        h.wait_elected("web", None).await;
        let le = h
            .wait_status("web", |le| {
                condition(le, "SpecValid").is_some_and(|c| c.reason == "OwnerSelectorUnknown")
            })
            .await;
        let valid = condition(&le, "SpecValid").expect("SpecValid");
        assert_eq!(valid.status, "True");
        assert!(valid.message.contains("ReplicaSet"), "{}", valid.message);
        assert!(has_condition(&le, "Ready", "True"));
        h.finish().await;
    })
    .await;
}

/// Rule 1 across elections: `middle` cannot take its leader label off a pod its selector no
/// longer matches yet (every patch of that pod fails); `younger` selects that pod and one that
/// `older` now selects. `older` must not label a second leader among `younger`'s pods while that
/// label stands, and leads once `middle` took it off. Over the whole recorded history no two
/// pods carry the leader label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_election_waits_for_a_label_left_on_a_pod_its_writer_no_longer_selects() {
    with_namespace("sp-left", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.bare_pod("p0", &[("shared", "yes")]).await;
        h.bare_pod("p1", &[("shared", "yes"), ("tier", "one")])
            .await;
        h.start_operator().await;
        let tier = |t: &str| json!({"selector": {"matchLabels": {"tier": t}}});
        h.election("older", tier("zero")).await;
        h.election("middle", tier("one")).await;
        let middle = h.wait_elected("middle", None).await;
        assert_eq!(middle.pod, "p1");
        h.election(
            "younger",
            json!({"selector": {"matchLabels": {"shared": "yes"}}}),
        )
        .await;
        h.wait_status("younger", |le| phase(le).as_deref() == Some("Conflict"))
            .await;

        // `middle` no longer selects its leader and cannot unlabel it yet; `older` now selects
        // the other pod.
        let fault = h.kube_faults.add(harness::pod_patches_fail().name("p1"));
        h.set_pod_label("p1", "tier", None).await;
        h.set_pod_label("p0", "tier", Some("zero")).await;
        h.wait_status("younger", |le| {
            condition(le, "Exclusive").is_some_and(|c| c.message.contains("older"))
        })
        .await;
        // A window in which `older` must not label, not a synchronisation.
        let labelled = h
            .poll_until(Duration::from_secs(3), || {
                role_in(&h.current(), "p0") == Some("leader")
            })
            .await;
        assert!(!labelled, "older labelled p0 beside p1: {:#?}", h.current());
        assert_eq!(role_in(&h.current(), "p1"), Some("leader"));

        h.kube_faults.remove(fault);
        let older = h.wait_elected("older", None).await;
        assert_eq!(older.pod, "p0");
        h.finish().await;
    })
    .await;
}
