//! Rule 7: deleting a LeaderElection (or withdrawing it: yielding to an older election,
//! acting with edited labels, key or Consul access) cleans up in order: the labels that may
//! lead, then the key and session, then the rest; and the wait for Consul is bounded.

use std::time::Duration;

use jiff::Timestamp;

use crate::crd::SKIP_CONSUL_CLEANUP_ANNOTATION;
use crate::election::cleanup_deadline::{Deadline, UNINSTALL_BOUND, bound, deadline, gave_up};
use crate::election::config::{ElectionKey, Owner};
use crate::election::plan::EventReason;
use crate::election::session_names::session_name;
use crate::election::withdrawal::{
    Footprint, LabelledPod, Performed, SessionToEnd, Sessions, Step, Withdrawal, Withdrawn,
    ends_recorded, fence, session_to_end, withdrawal,
};

// ---- The order of a withdrawal (`withdrawal::withdrawal`, `withdrawal::fence`) ----

fn pod(name: &str, value: Option<&str>) -> LabelledPod {
    LabelledPod {
        pod: name.to_owned(),
        uid: format!("uid-{name}"),
        value: value.map(str::to_owned),
        shared: Default::default(),
    }
}

fn unlabel(name: &str) -> Step {
    Step::Unlabel {
        pod: name.to_owned(),
        uid: format!("uid-{name}"),
    }
}

const MANAGED: Footprint<'static> = Footprint {
    follower: Some("follower"),
    managed: true,
};

fn held(id: &str) -> SessionToEnd {
    SessionToEnd::Held(id.to_owned())
}

fn release(id: &str) -> Step {
    Step::Release {
        session: id.to_owned(),
    }
}

fn owner() -> Owner {
    Owner::new("prod", "ops.consul-elector")
}

fn election() -> ElectionKey {
    ElectionKey {
        namespace: "shop".into(),
        name: "web".into(),
    }
}

/// The sessions a withdrawal of `shop/web` by this install may end.
fn sessions(held: Option<&str>, recorded: Option<&str>) -> Sessions {
    Sessions {
        held: held.map(str::to_owned),
        recorded: recorded.map(str::to_owned),
        owner: owner(),
        election: election(),
    }
}

#[test]
fn the_leader_label_goes_before_the_key_and_the_followers_after_it() {
    let pods = [
        pod("a", Some("follower")),
        pod("b", Some("leader")),
        pod("c", Some("follower")),
    ];
    assert_eq!(
        withdrawal(MANAGED, &pods, Some(&held("s1"))),
        vec![
            unlabel("b"),
            release("s1"),
            Step::Destroy(held("s1")),
            unlabel("a"),
            unlabel("c")
        ]
    );
    // No session to end: nothing is sent to Consul.
    assert_eq!(
        withdrawal(MANAGED, &pods, None),
        vec![unlabel("b"), unlabel("a"), unlabel("c")]
    );
}

/// Drives `withdrawal`, answering each step with `answer`; the steps handed out, and the
/// outcome.
fn perform(
    mut withdrawal: Withdrawal,
    answer: impl Fn(&Step) -> Performed,
) -> (Vec<Step>, Withdrawn) {
    let mut handed = Vec::new();
    while let Some(step) = withdrawal.poll() {
        assert_eq!(
            withdrawal.poll(),
            None,
            "nothing more while an outcome is owed"
        );
        withdrawal.done(answer(&step));
        handed.push(step);
    }
    (handed, withdrawal.outcome())
}

/// Fails the steps `fails` names; every other step takes effect.
fn failing(fails: impl Fn(&Step) -> bool) -> impl Fn(&Step) -> Performed {
    move |step| {
        if fails(step) {
            Performed::Failed
        } else {
            Performed::Done
        }
    }
}

#[test]
fn a_failed_pod_patch_ends_the_withdrawal_and_consul_failing_does_not() {
    let pods = [pod("a", Some("follower")), pod("b", Some("leader"))];
    let whole = || Withdrawal::whole(MANAGED, &pods, sessions(Some("s1"), None));
    assert_eq!(
        perform(whole(), failing(|_| false)),
        (
            withdrawal(MANAGED, &pods, Some(&held("s1"))),
            Withdrawn::Done
        )
    );
    // The leader label could not come off: the key is not released (rule 7).
    assert_eq!(
        perform(whole(), failing(|step| *step == unlabel("b"))),
        (vec![unlabel("b")], Withdrawn::Stopped)
    );
    // Consul failing leaves the key and the session for a retry; the other labels still go.
    assert_eq!(
        perform(whole(), failing(|step| *step == release("s1"))),
        (
            vec![unlabel("b"), release("s1"), unlabel("a")],
            Withdrawn::ConsulFailed
        )
    );
    // A follower's patch failing after Consul ends it too: the cleanup is retried.
    assert_eq!(
        perform(whole(), failing(|step| *step == unlabel("a"))).1,
        Withdrawn::Stopped
    );
    assert_eq!(
        perform(Withdrawal::fence(MANAGED, &pods), failing(|_| false)),
        (vec![unlabel("b")], Withdrawn::Done)
    );
}

#[test]
fn without_a_usable_consul_access_the_held_session_is_left_to_expire() {
    let pods = [pod("a", Some("leader")), pod("b", Some("follower"))];
    let whole = Withdrawal::whole(MANAGED, &pods, sessions(Some("s1"), Some("s0")));
    let answer = |step: &Step| match step {
        step if step.in_consul() => Performed::NoAccess,
        _ => Performed::Done,
    };
    // Never the operator's own access instead: the session is no longer renewed, and nothing
    // else is asked of Consul.
    assert_eq!(
        perform(whole, answer),
        (
            vec![unlabel("a"), release("s1"), Step::Forget, unlabel("b")],
            Withdrawn::Done
        )
    );
}

#[test]
fn a_session_only_the_status_names_is_read_and_ended_only_when_it_is_ours() {
    let pods = [pod("a", Some("leader"))];
    let recorded = || Withdrawal::whole(MANAGED, &pods, sessions(None, Some("s0")));
    let named = |name: Option<String>| {
        move |step: &Step| match step {
            Step::ReadSession(_) => Performed::SessionNamed(name.clone()),
            _ => Performed::Done,
        }
    };
    let ours = session_name(&owner(), &election(), "a");
    assert_eq!(
        perform(recorded(), named(Some(ours))),
        (
            vec![
                unlabel("a"),
                Step::ReadSession("s0".into()),
                release("s0"),
                Step::Destroy(SessionToEnd::Recorded("s0".into())),
            ],
            Withdrawn::Done
        )
    );
    let theirs = session_name(
        &Owner::new("prod", "other.consul-elector"),
        &election(),
        "a",
    );
    for name in [Some(theirs), None] {
        assert_eq!(
            perform(recorded(), named(name)),
            (
                vec![unlabel("a"), Step::ReadSession("s0".into())],
                Withdrawn::Done
            )
        );
    }
    // A read that fails is a Consul failure: retried.
    assert_eq!(
        perform(
            recorded(),
            failing(|step| matches!(step, Step::ReadSession(_)))
        )
        .1,
        Withdrawn::ConsulFailed
    );
}

#[test]
fn any_value_but_the_follower_counts_as_a_leader() {
    // A leader value the spec has since replaced, or no value at all (the pod kept only
    // the annotations), is still taken off before the key is released.
    let pods = [pod("a", Some("primary")), pod("b", None)];
    assert_eq!(
        withdrawal(MANAGED, &pods, Some(&held("s1"))),
        vec![
            unlabel("a"),
            unlabel("b"),
            release("s1"),
            Step::Destroy(held("s1"))
        ]
    );
}

#[test]
fn without_a_readable_spec_every_labelled_pod_counts_as_a_leader() {
    let unknown = Footprint {
        follower: None,
        managed: true,
    };
    let pods = [pod("a", Some("follower"))];
    assert_eq!(
        withdrawal(unknown, &pods, Some(&held("s1"))),
        vec![unlabel("a"), release("s1"), Step::Destroy(held("s1"))]
    );
}

#[test]
fn observe_mode_never_touches_consul() {
    let observed = Footprint {
        follower: Some("follower"),
        managed: false,
    };
    let pods = [pod("a", Some("leader")), pod("b", Some("follower"))];
    assert_eq!(
        withdrawal(observed, &pods, Some(&held("s1"))),
        vec![unlabel("a"), unlabel("b")]
    );
}

#[test]
fn fencing_takes_only_the_leader_labels() {
    let pods = [pod("a", Some("follower")), pod("b", Some("leader"))];
    assert_eq!(fence(MANAGED, &pods), vec![unlabel("b")]);
}

// ---- Consul's bound (`cleanup_deadline::deadline`) ----

const BOUND: Duration = Duration::from_secs(300);

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[test]
fn the_retry_delay_grows_and_never_passes_the_bound() {
    let retry = |elapsed: i64| deadline(None, Some(at(1_000)), at(1_000 + elapsed), BOUND);
    assert_eq!(retry(0), Deadline::RetryIn(Duration::from_secs(1)));
    assert_eq!(retry(20), Deadline::RetryIn(Duration::from_secs(5)));
    assert_eq!(retry(200), Deadline::RetryIn(Duration::from_secs(30)));
    assert_eq!(retry(290), Deadline::RetryIn(Duration::from_secs(10)));
    assert!(matches!(retry(300), Deadline::GiveUp(_)));
    assert!(matches!(retry(10_000), Deadline::GiveUp(_)));
}

#[test]
fn the_annotation_gives_up_at_once() {
    assert!(matches!(
        deadline(Some("true"), Some(at(1_000)), at(1_000), BOUND),
        Deadline::GiveUp(why) if why.contains(SKIP_CONSUL_CLEANUP_ANNOTATION)
    ));
    // Only "true" skips.
    assert_eq!(
        deadline(Some("yes"), Some(at(1_000)), at(1_000), BOUND),
        Deadline::RetryIn(Duration::from_secs(1))
    );
}

#[test]
fn an_uninstall_waits_for_consul_less_than_its_hook_waits() {
    assert_eq!(bound(false, BOUND), BOUND);
    assert_eq!(bound(true, BOUND), UNINSTALL_BOUND);
    assert_eq!(
        bound(true, Duration::from_secs(10)),
        Duration::from_secs(10)
    );
    // The hook's default wait (`release-elections --timeout`, the chart's
    // uninstallHook.timeout) leaves a minute beyond it.
    let hook = crate::consul::parse_go_duration("2m").expect("a duration");
    assert!(UNINSTALL_BOUND + Duration::from_secs(60) <= hook);
}

#[test]
fn an_election_not_deleted_retries_from_the_shortest_delay() {
    assert_eq!(
        deadline(None, None, at(1_000), BOUND),
        Deadline::RetryIn(Duration::from_secs(1))
    );
}

// ---- What a withdrawal takes off (`withdrawal::acted_with`) ----

#[test]
fn a_withdrawal_takes_off_what_the_operator_acted_with() {
    use crate::crd::{AppliedSpec, DEFAULT_ROLE_LABEL};
    use crate::election::config::Mode;
    use crate::election::tests::support::config;
    use crate::election::withdrawal::{Acted, acted_with};

    let spec = config();
    let applied = AppliedSpec {
        label_key: "old/role".into(),
        follower: "standby".into(),
        key: "elector/shop/old".into(),
        ..AppliedSpec::default()
    };
    // The status's record wins over the spec as it reads now.
    assert_eq!(
        acted_with(Some(&applied), Some(&spec), false, "default".into()),
        Acted {
            label_key: "old/role".into(),
            follower: Some("standby".into()),
            consul_key: "elector/shop/old".into(),
            managed: true,
        }
    );
    // Without a record: the spec.
    let from_spec = acted_with(None, Some(&spec), false, "default".into());
    assert_eq!(
        (from_spec.label_key, from_spec.consul_key),
        (spec.labels.key.clone(), spec.key.clone())
    );
    // An invalid spec: the defaults, and every labelled pod may lead.
    let unknown = acted_with(None, None, false, "default".into());
    assert_eq!(unknown.label_key, DEFAULT_ROLE_LABEL);
    assert_eq!(unknown.follower, None);
    assert_eq!(unknown.consul_key, "default");
    assert!(unknown.managed);
    // Observe mode: no session of the operator's, unless it still holds one.
    let observe = crate::election::config::ElectionConfig {
        mode: Mode::Observe,
        ..spec
    };
    assert!(!acted_with(None, Some(&observe), false, "default".into()).managed);
    assert!(acted_with(None, Some(&observe), true, "default".into()).managed);
}

#[test]
fn giving_up_names_what_was_left_in_consul() {
    let held = gave_up(
        "elector/shop/web",
        Some("s1"),
        "the bound passed",
        "timeout",
    );
    assert_eq!(held.reason, EventReason::ConsulCleanupSkipped);
    assert!(held.warning);
    assert_eq!(
        held.note,
        "gave up cleaning up in Consul (the bound passed; last error: timeout): the key elector/shop/web may still be held by session s1, which is no longer renewed and expires after its TTL"
    );
    let key_only = gave_up("elector/shop/web", None, "skipped", "refused");
    assert!(
        key_only
            .note
            .ends_with("the key elector/shop/web may still exist")
    );
}

// ---- Which session a withdrawal ends (`withdrawal::session_to_end`, `ends_recorded`) ----

#[test]
fn the_held_session_is_ended_before_any_the_status_names() {
    assert_eq!(
        session_to_end(Some("s1".into()), Some("s0".into())),
        Some(SessionToEnd::Held("s1".into()))
    );
    assert_eq!(
        session_to_end(None, Some("s0".into())),
        Some(SessionToEnd::Recorded("s0".into()))
    );
    assert_eq!(session_to_end(None, None), None);
}

#[test]
fn a_session_only_the_status_names_is_ended_only_under_this_installs_name() {
    let owner = Owner::new("prod", "ops.consul-elector");
    let election = ElectionKey {
        namespace: "shop".into(),
        name: "web".into(),
    };
    let ours = session_name(&owner, &election, "web-0");
    assert!(ends_recorded(&ours, &owner, &election));
    // A name of an earlier version, without the install: the status vouches for it.
    assert!(ends_recorded(
        "consul-elector/prod/shop/web/web-0",
        &owner,
        &election
    ));
    let other_install = Owner::new("prod", "other.consul-elector");
    let theirs = session_name(&other_install, &election, "web-0");
    assert!(!ends_recorded(&theirs, &owner, &election));
    let other_election = ElectionKey {
        namespace: "shop".into(),
        name: "db".into(),
    };
    let elsewhere = session_name(&owner, &other_election, "web-0");
    assert!(!ends_recorded(&elsewhere, &owner, &election));
    assert!(!ends_recorded(
        "an application's session",
        &owner,
        &election
    ));
}
