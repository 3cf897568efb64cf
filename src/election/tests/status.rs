//! The status a plan reports: phase, leader (with since, IP and session), fencing token,
//! transitions (leader changes only), candidates with reasons, and the `LeaderElected` and
//! `ConsulAvailable` conditions.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::{Action, CandidateState, Phase};
use crate::election::planner::{CONSUL_AVAILABLE, LEADER_ELECTED};
use crate::election::refusal::ConsulRefusal;

#[test]
fn candidates_list_every_selected_pod_sorted_with_reasons() {
    let scene = Scene::elected("c", &[], 5)
        .with_pod(pod("e").follower().terminating())
        .with_pod(pod("b").follower().not_ready_since(50))
        .with_pod(pod("a").follower())
        .with_pod(pod("d").follower().finished())
        .with_pod(pod("x").follower().unselected());
    let plan = scene.plan();
    let c = |pod: &str, eligible: bool, reason: Option<&'static str>| CandidateState {
        pod: pod.into(),
        eligible,
        reason,
        priority: 0,
    };
    assert_eq!(
        plan.status.candidates,
        vec![
            c("a", true, None),
            c("b", false, Some("NotReady")),
            c("c", true, None),
            c("d", false, Some("Finished")),
            c("e", false, Some("Terminating")),
        ]
    );
}

#[test]
fn a_not_ready_pod_is_eligible_when_readiness_is_not_required() {
    let config = crate::election::config::ElectionConfig {
        require_ready: false,
        ..config()
    };
    let plan = Scene::elected("a", &[], 1)
        .config(config)
        .with_pod(pod("b").follower().not_ready_since(3))
        .plan();
    assert!(plan.status.candidates.iter().all(|c| c.eligible));
}

#[test]
fn conditions_follow_the_election() {
    let cases: Vec<(&str, Scene, bool, &str, bool)> = vec![
        (
            "elected",
            Scene::elected("a", &["b"], 5),
            true,
            "Elected",
            true,
        ),
        ("no pods", Scene::new(vec![]), false, "NoCandidates", true),
        (
            "electing",
            Scene::new(vec![pod("a")]),
            false,
            "Electing",
            true,
        ),
        (
            "held elsewhere",
            Scene::elected("a", &[], 5).lock(held("x", 6, "a")),
            false,
            "LockHeldElsewhere",
            true,
        ),
        (
            "fenced",
            Scene::elected("a", &[], 5).session(Some(session("s1", "a").unconfirmed_since(70))),
            false,
            "Fenced",
            false,
        ),
        (
            "kv unknown, nothing adopted",
            Scene::new(vec![pod("a")]).lock(LockView::Unknown),
            false,
            "ConsulUnavailable",
            false,
        ),
    ];
    for (name, scene, elected, reason, available) in cases {
        let plan = scene.plan();
        let e = condition(&plan.status, LEADER_ELECTED);
        assert_eq!((e.status, e.reason), (elected, reason), "{name}");
        assert!(!e.message.is_empty());
        let a = condition(&plan.status, CONSUL_AVAILABLE);
        assert_eq!(a.status, available, "{name}");
        assert_eq!(
            a.reason,
            if available {
                "Available"
            } else {
                "Unreachable"
            }
        );
        assert_eq!(plan.status.conditions.len(), 2);
    }
}

#[test]
fn phases() {
    assert_eq!(Scene::new(vec![]).plan().status.phase, Phase::Pending);
    assert_eq!(
        Scene::new(vec![pod("a")]).plan().status.phase,
        Phase::Electing
    );
    assert_eq!(
        Scene::elected("a", &[], 1).plan().status.phase,
        Phase::Elected
    );
}

#[test]
fn transitions_count_leader_changes_only() {
    // First election: 0.
    let mut world = World::new(Scene::new(vec![pod("a"), pod("b")]));
    world.settle();
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    assert_eq!(world.scene.recorded.transitions, 0);

    // A -> B: +1.
    world.edit(|s| s.without_pod("a").now(t(200)));
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert_eq!(world.scene.recorded.transitions, 1);

    // Fenced, then the same pod again: +0.
    world.edit(|s| {
        let sess = s.session.clone().expect("session");
        let mut unconfirmed = sess.clone();
        unconfirmed.health = crate::election::observe::SessionHealth::Unconfirmed {
            renewed_at: mono(t(190)),
        };
        s.session(Some(unconfirmed)).now(t(300))
    });
    world.settle();
    assert!(world.leaders().is_empty());
    assert_eq!(world.scene.recorded.transitions, 1);
    world.edit(|s| {
        let mut alive = s.session.clone().expect("session");
        alive.health = crate::election::observe::SessionHealth::Alive {
            renewed_at: mono(t(310)),
        };
        s.session(Some(alive)).now(t(310))
    });
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert_eq!(world.scene.recorded.transitions, 1);
    // The since of B's leadership survives the fence.
    assert_eq!(
        world.scene.recorded.leader.as_ref().map(|l| l.since),
        Some(t(200))
    );

    // B re-created under the same name is another pod: +1.
    world.edit(|s| {
        s.with_pod(pod("b").with_uid("uid-b2").created(400))
            .now(t(400))
    });
    world.settle();
    assert_eq!(world.scene.recorded.transitions, 2);
    assert_eq!(
        world.scene.recorded.leader.as_ref().map(|l| l.uid.clone()),
        Some("uid-b2".into())
    );
}

#[test]
fn the_leader_reports_pod_ip_since_and_session() {
    let mut scene = Scene::elected("a", &[], 5);
    scene.pods[0].pod_ip = Some("10.1.2.3".into());
    let leader = scene.plan().status.leader.expect("leader");
    assert_eq!(leader.pod_ip.as_deref(), Some("10.1.2.3"));
    assert_eq!(leader.since, t(0));
    assert_eq!(leader.session_id.as_deref(), Some("s1"));
    assert_eq!(leader.uid, uid("a"));
}

#[test]
fn the_last_leader_stays_on_record_while_nobody_leads() {
    let scene = Scene::elected("a", &["b"], 5)
        .recorded(recorded("a", "s1", 5, t(0), 4))
        .without_pod("a")
        .with_pod(pod("b").follower().not_ready_since(1));
    let plan = scene.plan();
    assert_eq!(plan.status.phase, Phase::Pending);
    assert_eq!(record(&plan.status), scene.recorded);
}

#[test]
fn a_refused_write_makes_consul_unavailable_naming_the_missing_right() {
    let refusal = ConsulRefusal::permission_denied("session create", "consul-elector/x");
    let plan = Scene::new(vec![pod("a"), pod("b")])
        .consul_refused(refusal.clone())
        .plan();
    let a = condition(&plan.status, CONSUL_AVAILABLE);
    assert!(!a.status);
    assert_eq!(a.reason, "PermissionDenied");
    assert_eq!(a.message, refusal.message);
    assert!(a.message.contains("session:write"), "{}", a.message);
    // The plan still tries (a fixed token must work at the next attempt without a restart),
    // and nobody is labelled leader meanwhile.
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::CreateSession { .. })),
        "{:?}",
        plan.actions
    );
    assert!(plan.status.leader.is_none());
    // Once no refusal is reported, the condition says Consul answers again.
    let plan = Scene::new(vec![pod("a"), pod("b")]).plan();
    assert_eq!(
        condition(&plan.status, CONSUL_AVAILABLE).reason,
        "Available"
    );
}

/// Each status write as the controller and the property tests render it
/// ([`StatusChange::render`]): the first whole status records what the operator acts with and
/// the lease timing of a managed election; records made before acting change only their own
/// field and keep the values recorded before, and leave the `StatusWritten` count to the next
/// whole status; a stand-back condition is news once.
mod status_change {
    use super::*;
    use crate::crd::conditions::{LEASE_TIMING_SAFE, STATUS_WRITTEN};
    use crate::crd::{AppliedSpec, LeaderElectionStatus, Phase as StatusPhase};
    use crate::election::config::Mode;
    use crate::election::observe::{SwitchoverOutcome, SwitchoverRecord};
    use crate::election::plan::EventReason;
    use crate::election::report::StandBack;
    use crate::election::status_change::StatusChange;

    fn has(status: &LeaderElectionStatus, type_: &str) -> bool {
        status.conditions.iter().any(|c| c.type_ == type_)
    }

    #[test]
    fn the_first_whole_status_records_what_the_operator_acts_with() {
        let plan = Scene::elected("a", &["b"], 5).plan();
        let decided = StatusChange::Decided {
            plan: Box::new(plan),
            spec_valid: spec_valid(),
            failed_writes: None,
        };
        let facts = || crate::election::status_change::Facts {
            labelled: Some(uid("a")),
            ..facts()
        };
        assert!(decided.whole());
        let first = decided.render(&LeaderElectionStatus::default(), &facts());
        assert_eq!(first.status.applied, facts().applied);
        assert_eq!(
            first.status.leader.as_ref().map(|l| l.pod.as_str()),
            Some("a")
        );
        assert!(has(&first.status, LEASE_TIMING_SAFE));
        assert!(has(&first.status, STATUS_WRITTEN));
        // An observing election reports no lease timing: it holds no session.
        let observe = crate::election::status_change::Facts {
            mode: Some(Mode::Observe),
            ..facts()
        };
        let observed = decided.render(&LeaderElectionStatus::default(), &observe);
        assert!(!has(&observed.status, LEASE_TIMING_SAFE));
        // Once recorded, the record stands until an edit is recorded.
        let recorded = AppliedSpec {
            key: "recorded/key".into(),
            ..AppliedSpec::default()
        };
        let before = LeaderElectionStatus {
            applied: Some(recorded.clone()),
            ..LeaderElectionStatus::default()
        };
        let next = decided.render(&before, &facts());
        assert_eq!(next.status.applied, Some(recorded));
    }

    #[test]
    fn records_change_their_own_field_only() {
        let before = LeaderElectionStatus {
            fencing_token: Some(3),
            phase: Some(StatusPhase::Elected),
            ..LeaderElectionStatus::default()
        };
        let edit = AppliedSpec {
            key: "edited/key".into(),
            ..AppliedSpec::default()
        };
        let edited = crate::election::status_change::Facts {
            applied: Some(edit.clone()),
            ..facts()
        };
        assert!(!StatusChange::Applied.whole());
        let applied = StatusChange::Applied.render(&before, &edited);
        assert_eq!(
            applied.status,
            LeaderElectionStatus {
                applied: Some(edit),
                ..before.clone()
            }
        );
        let switchover = SwitchoverRecord {
            to: "b".into(),
            from: Some("a".into()),
            leader: None,
            requested_at: t(90),
            completed_at: None,
            outcome: SwitchoverOutcome::InProgress,
            message: String::new(),
        };
        let change = StatusChange::Switchover {
            record: switchover,
            decides: None,
        };
        assert!(!change.whole());
        let recorded = change.render(&before, &facts());
        assert_eq!(recorded.status.phase, before.phase);
        assert!(recorded.status.last_switchover.is_some());
        assert!(!has(&recorded.status, STATUS_WRITTEN));
    }

    #[test]
    fn a_stand_back_warns_once() {
        let back = StandBack::conflict("older");
        let change = StatusChange::StandBack(back);
        assert!(change.whole());
        let first = change.render(&LeaderElectionStatus::default(), &facts());
        assert_eq!(first.status.phase, Some(StatusPhase::Conflict));
        assert_eq!(first.event.map(|e| e.reason), Some(EventReason::Conflict));
        let again = change.render(&first.status, &facts());
        assert_eq!(again.event, None);
    }

    #[test]
    fn a_released_election_says_nobody_leads_until_the_operator_is_back() {
        let plan = Scene::elected("a", &["b"], 5).plan();
        let decided = StatusChange::Decided {
            plan: Box::new(plan),
            spec_valid: spec_valid(),
            failed_writes: None,
        };
        let labelled = crate::election::status_change::Facts {
            labelled: Some(uid("a")),
            ..facts()
        };
        let mut elected = decided
            .render(&LeaderElectionStatus::default(), &labelled)
            .status;
        elected.served_by = Some("prod/ops.consul-elector".into());
        assert!(StatusChange::Released.whole());
        let released = StatusChange::Released.render(&elected, &facts());
        let status = &released.status;
        assert_eq!(status.phase, Some(StatusPhase::Pending));
        assert_eq!(status.leader, None);
        assert_eq!(
            status.last_leader.as_ref().map(|l| l.pod.as_str()),
            Some("a")
        );
        assert_eq!(
            status.fencing_token, elected.fencing_token,
            "the token stays on record"
        );
        assert_eq!(status.served_by, None, "no install serves it");
        let condition = |type_: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status.as_str(), c.reason.as_str()))
        };
        assert_eq!(condition(LEADER_ELECTED), Some(("False", "Released")));
        assert_eq!(condition("Ready"), Some(("False", "Released")));
        assert_eq!(condition("Stalled"), Some(("True", "Released")));
        assert_eq!(
            released.event.map(|e| (e.reason, e.warning)),
            Some((EventReason::Released, false))
        );
    }
}
