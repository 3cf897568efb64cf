//! Observe mode: the applications elect themselves; the operator mirrors the pod named in the
//! key's JSON value into labels and status and never writes to Consul (rule 7), except to
//! let go of its own session left from Managed mode (released and destroyed).

use super::support::*;
use crate::election::config::{ElectionConfig, Mode, ValueFormat};
use crate::election::key_value::{KeyHolder, holder_from_value};
use crate::election::observe::LockView;
use crate::election::plan::{EventReason, Phase, Plan};
use crate::election::planner::{CONSUL_AVAILABLE, LEADER_ELECTED};

fn observe() -> ElectionConfig {
    ElectionConfig {
        mode: Mode::Observe,
        ..config()
    }
}

fn app_holds(pod: &str, uid: &str, lock_index: u64) -> LockView {
    LockView::Held {
        session: "app-session".into(),
        lock_index,
        value: Some(value_for(pod, uid)),
    }
}

fn scene(pods: Vec<crate::election::observe::PodView>, lock: LockView) -> Scene {
    Scene::new(pods).config(observe()).lock(lock)
}

fn assert_no_consul(plan: &Plan) {
    assert!(
        consul_steps(plan).is_empty(),
        "Observe mode wrote to Consul: {plan:#?}"
    );
}

/// The key held by an application's session with `value`, in a scene reading it as `format`.
fn held_as(value: &[u8], format: ValueFormat) -> Scene {
    Scene::new(vec![pod("a"), pod("b"), pod("c")])
        .config(ElectionConfig {
            value_format: format,
            ..observe()
        })
        .lock(LockView::Held {
            session: "patroni-session".into(),
            lock_index: 9,
            value: Some(value.to_vec()),
        })
}

#[test]
fn a_leader_key_as_patroni_writes_it_names_the_pod_in_plain_text() {
    // Patroni's leader key holds the member's name, nothing else (here with a newline).
    let plan = held_as(b"b\n", ValueFormat::Plain).plan();
    assert_eq!(
        steps(&plan),
        vec![label_leader("b", 9, t(100)), follower("a"), follower("c")]
    );
    assert_no_consul(&plan);
    // Read as the operator's JSON, the same value names nobody: nobody is labelled.
    let plan = held_as(b"b", ValueFormat::Operator).plan();
    assert!(
        !steps(&plan)
            .iter()
            .any(|a| matches!(a, crate::election::plan::Action::LabelLeader { .. })),
        "{plan:#?}"
    );
    // A name no selected pod has labels nobody either.
    let plan = held_as(b"web-7", ValueFormat::Plain).plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), follower("b"), follower("c")]
    );
}

#[test]
fn a_json_value_names_the_pod_in_the_member_the_spec_says() {
    let json = ValueFormat::Json {
        field: "member".into(),
    };
    let plan = held_as(br#"{"member": "c", "role": "primary"}"#, json.clone()).plan();
    assert_eq!(steps(&plan)[0], label_leader("c", 9, t(100)));
    let plan = held_as(br#"{"pod": "c"}"#, json).plan();
    assert!(
        !steps(&plan)
            .iter()
            .any(|a| matches!(a, crate::election::plan::Action::LabelLeader { .. })),
        "the member is missing: {plan:#?}"
    );
}

#[test]
fn the_pod_named_in_the_key_is_mirrored_as_leader() {
    let s = scene(
        vec![pod("a"), pod("b"), pod("c")],
        app_holds("b", &uid("b"), 7),
    );
    let plan = s.plan();
    assert_eq!(
        steps(&plan),
        vec![label_leader("b", 7, t(100)), follower("a"), follower("c")]
    );
    assert_eq!(
        events(&plan),
        vec![(EventReason::LeaderElected, Some("b".into()))]
    );
    assert_no_consul(&plan);
    assert_eq!(plan.status.phase, Phase::Observing);
    let leader = plan.status.leader.clone().expect("leader");
    assert_eq!(leader.pod, "b");
    assert_eq!(
        leader.session_id, None,
        "the operator owns no session in Observe mode"
    );
    assert_eq!(plan.status.fencing_token, Some(7));
    assert!(condition(&plan.status, LEADER_ELECTED).status);
    assert!(condition(&plan.status, CONSUL_AVAILABLE).status);

    // Mirrored: nothing more to do.
    let mut world = World::new(s);
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
}

#[test]
fn a_new_holder_is_labelled_only_after_the_old_one_is_demoted() {
    let s = scene(
        vec![
            pod("a").follower(),
            pod("b").leader(7, t(0)),
            pod("c").follower(),
        ],
        app_holds("c", &uid("c"), 8),
    )
    .recorded(crate::election::observe::Recorded {
        leader: Some(crate::election::observe::LeaderRecord {
            pod: "b".into(),
            uid: uid("b"),
            pod_ip: None,
            since: t(0),
            session_id: None,
        }),
        fencing_token: Some(7),
        transitions: 2,
        last_switchover: None,
        served_by: None,
    });
    let plan = s.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("b"), label_leader("c", 8, t(100))]
    );
    assert_demotions_first(&s, &plan);
    assert_no_consul(&plan);
    assert_eq!(plan.status.transitions, 3);
}

#[test]
fn a_key_naming_no_selected_pod_mirrors_no_leader() {
    let cases = [
        app_holds("x", &uid("x"), 3),          // a pod that does not exist
        app_holds("b", "uid-of-another-b", 3), // another incarnation of the name
        app_holds("u", &uid("u"), 3),          // a pod that left the selector
        LockView::Held {
            session: "app".into(),
            lock_index: 3,
            value: Some(b"not json".to_vec()),
        },
        LockView::Held {
            session: "app".into(),
            lock_index: 3,
            value: None,
        },
        free(3),
        LockView::Absent,
    ];
    for lock in cases {
        let s = scene(
            vec![
                pod("a").follower(),
                pod("b").leader(2, t(0)),
                pod("u").unselected().follower(),
            ],
            lock.clone(),
        );
        let plan = s.plan();
        assert_eq!(
            steps(&plan),
            vec![follower("b"), unlabel("u")],
            "lock {lock:?}"
        );
        assert_no_consul(&plan);
        assert_eq!(plan.status.phase, Phase::Observing);
        assert_eq!(condition(&plan.status, LEADER_ELECTED).reason, "NoHolder");
    }
}

#[test]
fn consul_unknown_keeps_the_mirrored_labels() {
    let s = scene(
        vec![pod("a").follower(), pod("b").leader(7, t(0)), pod("c")],
        LockView::Unknown,
    );
    let plan = s.plan();
    assert_eq!(steps(&plan), vec![follower("c")]);
    assert_no_consul(&plan);
    assert!(!condition(&plan.status, CONSUL_AVAILABLE).status);
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).reason,
        "ConsulUnavailable"
    );
}

#[test]
fn switching_to_observe_demotes_then_releases_and_destroys_the_operators_session() {
    // Switched from Managed to Observe while leading: the leader label comes off first,
    // then the key is released (no lock-delay for the applications) and the session
    // destroyed, so that an application can acquire the key.
    let s = Scene::elected("a", &["b"], 4).config(observe());
    let plan = s.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), release("s1"), destroy("s1")]
    );
    assert_demotions_first(&s, &plan);
    assert_eq!(plan.status.phase, Phase::Observing);
    assert!(!condition(&plan.status, LEADER_ELECTED).status);

    // Then nothing of the operator's is left: the free key is mirrored as no holder.
    let mut world = World::new(s);
    world.settle();
    assert!(world.leaders().is_empty());
    let settled = world.step();
    assert_no_consul(&settled);
}

#[test]
fn a_leftover_session_not_holding_the_key_is_destroyed_in_observe_mode() {
    let s = scene(vec![pod("a"), pod("b")], free(4)).session(Some(session("s1", "a")));
    assert_eq!(consul_steps(&s.plan()), vec![destroy("s1")]);
    // The application's lock is never touched, only the operator's own session.
    let s = scene(vec![pod("a"), pod("b")], app_holds("b", &uid("b"), 5))
        .session(Some(session("s1", "a")));
    assert_eq!(consul_steps(&s.plan()), vec![destroy("s1")]);
}

#[test]
fn the_holder_is_mirrored_even_when_not_ready() {
    // The applications decided; readiness is theirs to judge.
    let s = scene(
        vec![pod("a").not_ready_since(10), pod("b")],
        app_holds("a", &uid("a"), 2),
    );
    assert_eq!(steps(&s.plan())[0], label_leader("a", 2, t(100)));
}

#[test]
fn the_value_parser_reads_pod_uid_and_cluster() {
    let holder = |pod: &str, uid: Option<&str>, cluster: Option<&str>| KeyHolder {
        pod: pod.into(),
        uid: uid.map(str::to_owned),
        cluster: cluster.map(str::to_owned),
        install: None,
    };
    assert_eq!(
        holder_from_value(&value_for("p", "u")),
        Some(holder("p", Some("u"), None))
    );
    assert_eq!(
        holder_from_value(br#"{"pod":"p","uid":"u","cluster":"east"}"#),
        Some(holder("p", Some("u"), Some("east")))
    );
    assert_eq!(
        holder_from_value(br#"{"pod":"p"}"#),
        Some(holder("p", None, None))
    );
    assert_eq!(
        holder_from_value(br#"{"pod":"p","cluster":7}"#),
        Some(holder("p", None, None))
    );
    assert_eq!(holder_from_value(br#"{"pod":3}"#), None);
    assert_eq!(holder_from_value(b"[]"), None);
    assert_eq!(holder_from_value(b""), None);
}

#[test]
fn a_value_with_a_cluster_is_mirrored_like_one_without() {
    let with_cluster = LockView::Held {
        session: "app-session".into(),
        lock_index: 2,
        value: Some(
            serde_json::json!({"pod": "a", "uid": uid("a"), "cluster": "east"})
                .to_string()
                .into_bytes(),
        ),
    };
    let s = scene(vec![pod("a"), pod("b")], with_cluster);
    assert_eq!(steps(&s.plan())[0], label_leader("a", 2, t(100)));
}

/// Observe mode is fenced like Managed mode (rule 2): a mirrored leader label whose key cannot
/// be read goes a TTL (`spec.session.ttl`) after the key was last read, unless the spec says
/// `KeepLeader`; until then the next look is planned for that moment.
#[test]
fn a_mirrored_label_goes_a_ttl_after_the_key_was_last_read() {
    let unreadable = scene(
        vec![pod("a").follower(), pod("b").leader(7, t(0))],
        LockView::Unknown,
    );

    let fresh = unreadable.clone().lock_confirmed_at(t(95)).plan();
    assert!(steps(&fresh).is_empty(), "{:?}", fresh.actions);
    assert_eq!(fresh.requeue_after, Some(secs(10)));

    let stale = unreadable.clone().lock_confirmed_at(t(85)).plan();
    assert_eq!(steps(&stale), vec![follower("b")]);
    assert_eq!(stale.status.phase, Phase::Fenced);
    assert_no_consul(&stale);

    let kept = unreadable
        .config(ElectionConfig {
            on_consul_unavailable: crate::election::config::UnavailablePolicy::KeepLeader,
            ..observe()
        })
        .lock_confirmed_at(t(85))
        .plan();
    assert!(steps(&kept).is_empty(), "{:?}", kept.actions);
}
