//! The reads before a reconcile's first plan: which read of the key rule 2 asks for, and
//! which session rule 3 takes over.

use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::election::config::Behavior;
use crate::election::key_value::{Holding, value_for};
use crate::election::observe::LeaderRecord;

fn election() -> ElectionKey {
    ElectionKey {
        namespace: "shop".into(),
        name: "web".into(),
    }
}

fn owner() -> Owner {
    Owner::new("prod", "ops.consul-elector")
}

fn settings() -> SessionConfig {
    SessionConfig {
        ttl: Duration::from_secs(15),
        lock_delay: Duration::from_secs(1),
        behavior: Behavior::Release,
    }
}

fn adopting(mode: Mode, holds_session: bool) -> Adopting {
    Adopting {
        election: election(),
        mode,
        holds_session,
        recorded_settings: None,
        spec_settings: settings(),
        owner: owner(),
    }
}

/// The key held by `session` with the value this install writes for `pod`.
fn held_for(session: &str, pod: &str) -> LockView {
    let holding = Holding {
        pod,
        uid: Some("uid-a"),
        pod_ip: None,
        node: None,
    };
    LockView::Held {
        session: session.into(),
        lock_index: 3,
        value: Some(value_for(
            holding,
            &election(),
            &owner(),
            Timestamp::UNIX_EPOCH,
        )),
    }
}

/// A status recording `session` for leader `pod`.
fn recorded(session: &str, pod: &str) -> Recorded {
    Recorded {
        leader: Some(LeaderRecord {
            pod: pod.into(),
            uid: format!("uid-{pod}"),
            pod_ip: None,
            since: Timestamp::UNIX_EPOCH,
            session_id: Some(session.into()),
        }),
        ..Recorded::default()
    }
}

/// Consul's answer for a session this install created for `pod`.
fn ours(pod: &str) -> SessionRead {
    SessionRead::Found {
        name: crate::election::session_names::session_name(&owner(), &election(), pod),
        settings: FoundSettings {
            ttl: Some(settings().ttl),
            lock_delay: settings().lock_delay,
            behavior: settings().behavior,
        },
    }
}

/// A first look of a Managed election holding no session, past its read of `lock`.
fn past_key_read(lock: LockView, status: &Recorded) -> (FirstLook, ElectionMemory) {
    let mut memory = ElectionMemory::default();
    let mut look = FirstLook::new(adopting(Mode::Managed, false));
    look.poll(&memory);
    look.key_read(Ok(lock), status, &mut memory);
    (look, memory)
}

fn refusal() -> ConsulRefusal {
    ConsulRefusal::permission_denied("kv get", "elector/shop/web")
}

#[test]
fn the_watched_view_is_read_unless_this_process_wrote_the_key_since_it_last_read_it() {
    let mut memory = ElectionMemory::default();
    let mut look = FirstLook::new(adopting(Mode::Managed, true));
    assert_eq!(look.poll(&memory), Some(Look::ReadKey(KeyRead::Watched)));

    memory.key.writing();
    let mut look = FirstLook::new(adopting(Mode::Managed, true));
    assert_eq!(look.poll(&memory), Some(Look::ReadKey(KeyRead::Fresh)));
    // Until its answer, nothing else is asked for.
    assert_eq!(look.poll(&memory), None);
    assert!(!look.is_over());
    look.key_read(Ok(LockView::Absent), &Recorded::default(), &mut memory);
    assert!(
        !memory.key.written_since_read(),
        "a fresh read shows the write"
    );
    assert_eq!(look.lock(), &LockView::Absent);
    assert_eq!(look.poll(&memory), None);
    assert!(look.is_over(), "a session is held: nothing to adopt");
}

#[test]
fn a_failed_fresh_read_leaves_the_key_written_and_unknown() {
    let mut memory = ElectionMemory::default();
    memory.key.writing();
    let mut look = FirstLook::new(adopting(Mode::Managed, true));
    look.poll(&memory);
    assert_eq!(
        look.key_read(Err(None), &Recorded::default(), &mut memory),
        None
    );
    assert!(memory.key.written_since_read());
    assert_eq!(look.lock(), &LockView::Unknown);
}

#[test]
fn a_refused_read_is_reported_once_and_a_read_that_answers_ends_it() {
    let mut memory = ElectionMemory::default();
    let mut look = FirstLook::new(adopting(Mode::Managed, true));
    look.poll(&memory);
    let event = look.key_read(Err(Some(refusal())), &Recorded::default(), &mut memory);
    assert!(event.is_some_and(|e| e.reason == crate::election::plan::EventReason::ConsulRefused));
    let mut again = FirstLook::new(adopting(Mode::Managed, true));
    again.poll(&memory);
    let repeated = again.key_read(Err(Some(refusal())), &Recorded::default(), &mut memory);
    assert_eq!(repeated, None, "the same refusal is not news");

    let mut answered = FirstLook::new(adopting(Mode::Managed, true));
    answered.poll(&memory);
    answered.key_read(Ok(LockView::Absent), &Recorded::default(), &mut memory);
    assert_eq!(memory.refusal(), None);
}

#[test]
fn the_keys_holder_vouched_for_by_its_value_is_adopted_without_reading_the_status_one() {
    let status = recorded("s-status", "a");
    let (mut look, memory) = past_key_read(held_for("s-key", "a"), &status);
    assert_eq!(look.poll(&memory), Some(Look::ReadSession("s-key".into())));
    assert_eq!(look.session_read(ours("a"), &status), None);
    assert_eq!(
        look.poll(&memory),
        Some(Look::Adopt {
            session: "s-key".into(),
            pod: "a".into(),
            uid: "uid-a".into(),
        })
    );
    look.adopted(Ok(true));
    assert_eq!(look.poll(&memory), None);
    assert!(look.is_over());
}

#[test]
fn a_session_consul_no_longer_has_gives_way_to_the_next_candidate_and_a_failure_ends_it() {
    let status = recorded("s-status", "a");
    let (mut look, memory) = past_key_read(held_for("s-key", "a"), &status);
    look.poll(&memory);
    assert_eq!(look.session_read(ours("a"), &status), None);
    look.poll(&memory);
    look.adopted(Ok(false));
    assert_eq!(
        look.poll(&memory),
        Some(Look::ReadSession("s-status".into()))
    );
    assert_eq!(look.session_read(ours("a"), &status), None);
    assert!(
        matches!(look.poll(&memory), Some(Look::Adopt { session, .. }) if session == "s-status")
    );
    look.adopted(Err(()));
    assert_eq!(look.poll(&memory), None);
    assert!(look.is_over());
}

#[test]
fn a_session_named_by_another_install_or_with_other_settings_is_left_alone() {
    let status = recorded("s-status", "a");
    let other = Owner::new("prod", "other.consul-elector");
    let cases = [
        (SessionRead::Missing, LeftAlone::Missing),
        (
            SessionRead::Found {
                name: crate::election::session_names::session_name(&other, &election(), "a"),
                settings: FoundSettings {
                    ttl: Some(settings().ttl),
                    lock_delay: settings().lock_delay,
                    behavior: settings().behavior,
                },
            },
            LeftAlone::NotNamedByThisInstall,
        ),
        (
            SessionRead::Found {
                name: crate::election::session_names::session_name(&owner(), &election(), "a"),
                settings: FoundSettings {
                    ttl: Some(Duration::from_secs(86_400)),
                    lock_delay: settings().lock_delay,
                    behavior: settings().behavior,
                },
            },
            LeftAlone::NotVouchedFor,
        ),
    ];
    for (read, why) in cases {
        let (mut look, memory) = past_key_read(LockView::Free { lock_index: 3 }, &status);
        assert_eq!(
            look.poll(&memory),
            Some(Look::ReadSession("s-status".into()))
        );
        assert_eq!(look.session_read(read.clone(), &status), Some(why));
        assert_eq!(look.poll(&memory), None, "{read:?} is not adopted");
        assert!(look.is_over());
    }
}

#[test]
fn an_observe_election_or_one_holding_a_session_reads_no_session() {
    for (mode, holds) in [(Mode::Observe, false), (Mode::Managed, true)] {
        let mut memory = ElectionMemory::default();
        let status = recorded("s-status", "a");
        let mut look = FirstLook::new(adopting(mode, holds));
        look.poll(&memory);
        look.key_read(Ok(held_for("s-key", "a")), &status, &mut memory);
        assert_eq!(look.poll(&memory), None);
        assert!(look.is_over());
    }
}
