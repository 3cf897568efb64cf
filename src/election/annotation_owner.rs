//! Pods shared by elections with different label keys (docs/design.md section 1: "a pod can be
//! leader in one election and follower in another"): which election writes the operator's
//! annotations of a pod (`elector.dev/fencing-token`, `elector.dev/leader-since`,
//! `elector.dev/election`), which exist once per pod. One election owns them, the one
//! `elector.dev/election` names:
//! - the election a pod leads takes ownership when it labels it leader, unless the owner
//!   also labels it leader (then the first one keeps the annotations; the second leader's
//!   token is in its status only);
//! - an owner that demotes or unlabels a pod another election leads gives ownership up
//!   (removes `elector.dev/election` with its leader annotations), so that one can take it;
//! - any other patch of a pod owned by another election writes only the election's label.
//!
//! Two elections writing them would otherwise undo each other forever: a follower patch of
//! one strips the leader annotations of the other, which labels its leader again (and, the
//! label looking like a new acquisition, raises its token by releasing and re-acquiring).

use jiff::Timestamp;

use super::config::LabelConfig;
use super::observe::PodView;
pub use super::observe::SharedPod;

/// How a patch of a pod by one election treats the operator's annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Annotations {
    /// Write them as the role says (this election owns them, or takes them).
    Write,
    /// Leave them alone (another election owns them).
    Keep,
    /// Remove them all, the ownership included (the pod leads in another election).
    GiveUp,
}

/// What a patch giving the pod the leader role (`to_leader`) or another role does with the
/// annotations.
pub fn annotations(pod: SharedPod, to_leader: bool) -> Annotations {
    match pod.foreign_owner_leads {
        Some(owner_leads) if to_leader && !owner_leads => Annotations::Write,
        Some(_) => Annotations::Keep,
        None if to_leader => Annotations::Write,
        None if pod.led_by_another && pod.owned_by_me => Annotations::GiveUp,
        None if pod.led_by_another => Annotations::Keep,
        None => Annotations::Write,
    }
}

/// Who owns a pod's operator annotations, as one election sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// This election.
    Me,
    /// Another existing election.
    Another,
    /// An election that no longer exists (or is being deleted).
    Gone,
    /// Nobody: the annotations name no election.
    Nobody,
}

impl Owner {
    /// The owner of annotations that name election `named` (`elector.dev/election`), as
    /// election `me` sees it; `exists` tells whether `named` is an election that exists and is
    /// not being deleted (asked only for another election's name).
    pub fn of(named: Option<&str>, me: &str, exists: impl FnOnce() -> bool) -> Owner {
        match named {
            None => Owner::Nobody,
            Some(named) if named == me => Owner::Me,
            Some(_) if exists() => Owner::Another,
            Some(_) => Owner::Gone,
        }
    }
}

/// Rewrites `view`, a pod as read, into what this election itself wrote or would write, so
/// that its planner decides as if the pod's annotations were its own:
/// - its leader (labelled `labels.leader` under its key) carries the token and since of its
///   leadership (`leadership`: as labelled by this reconcile or recorded), the since only
///   while another election owns the annotations (else it is left unknown, so that the leader
///   is labelled again and takes them);
/// - any other pod whose annotations another election owns carries none;
/// - its follower whose annotations nobody owns, led by no other election
///   (`led_by_another`, asked only for such a follower), is marked [`PodView::reclaim`]:
///   labelling it again claims them.
pub fn shared_view(
    view: &mut PodView,
    owner: Owner,
    led_by_another: impl FnOnce() -> bool,
    labels: &LabelConfig,
    leadership: Option<(u64, Timestamp)>,
) {
    if owner == Owner::Me {
        return;
    }
    if view.role.as_deref() == Some(labels.leader.as_str()) {
        view.fencing_token = leadership.map(|(token, _)| token.to_string());
        view.leader_since = leadership
            .filter(|_| owner == Owner::Another)
            .map(|(_, since)| since.to_string());
    } else if owner == Owner::Another {
        view.fencing_token = None;
        view.leader_since = None;
    } else if view.role.as_deref() == Some(labels.follower.as_str())
        && owner == Owner::Nobody
        && !led_by_another()
    {
        view.reclaim = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALONE: SharedPod = SharedPod {
        foreign_owner_leads: None,
        owned_by_me: true,
        led_by_another: false,
    };

    #[test]
    fn a_pod_of_one_election_gets_its_annotations_written() {
        assert_eq!(annotations(ALONE, true), Annotations::Write);
        assert_eq!(annotations(ALONE, false), Annotations::Write);
    }

    #[test]
    fn the_owner_that_leads_keeps_the_annotations_from_a_second_leader() {
        let owned = |leads| SharedPod {
            foreign_owner_leads: Some(leads),
            owned_by_me: false,
            led_by_another: leads,
        };
        assert_eq!(annotations(owned(true), true), Annotations::Keep);
        // An owner that only labels it follower gives way to the election it leads in.
        assert_eq!(annotations(owned(false), true), Annotations::Write);
        assert_eq!(annotations(owned(false), false), Annotations::Keep);
    }

    #[test]
    fn an_owner_demoting_a_pod_another_election_leads_gives_the_annotations_up() {
        let led = SharedPod {
            led_by_another: true,
            ..ALONE
        };
        assert_eq!(annotations(led, false), Annotations::GiveUp);
        let not_mine = SharedPod {
            owned_by_me: false,
            ..led
        };
        assert_eq!(annotations(not_mine, false), Annotations::Keep);
    }

    fn labels() -> LabelConfig {
        LabelConfig {
            key: "elector.dev/role".into(),
            leader: "leader".into(),
            follower: "follower".into(),
        }
    }

    fn view(role: &str) -> PodView {
        PodView {
            name: "web-0".into(),
            uid: "u0".into(),
            selected: true,
            ready: true,
            not_ready_since: None,
            deleting: false,
            finished: false,
            created_at: Timestamp::UNIX_EPOCH,
            pod_ip: None,
            node: None,
            role: Some(role.into()),
            fencing_token: Some("3".into()),
            label_token: Some("3".into()),
            leader_since: Some("2026-11-29T10:00:00Z".into()),
            priority: Some(0),
            handover: None,
            reclaim: false,
            shared: Default::default(),
        }
    }

    #[test]
    fn the_owner_is_the_election_the_annotations_name_if_it_still_exists() {
        let never = || -> bool { panic!("only another election's existence is asked") };
        assert_eq!(Owner::of(None, "web", never), Owner::Nobody);
        assert_eq!(Owner::of(Some("web"), "web", never), Owner::Me);
        assert_eq!(Owner::of(Some("db"), "web", || true), Owner::Another);
        assert_eq!(Owner::of(Some("db"), "web", || false), Owner::Gone);
    }

    #[test]
    fn a_shared_pod_is_planned_on_as_this_election_wrote_it() {
        let since: Timestamp = "2026-11-29T11:00:00Z".parse().unwrap();
        let ours = Some((7, since));
        let shared = |role: &str, owner: Owner, led_by_another: bool| {
            let mut v = view(role);
            shared_view(&mut v, owner, || led_by_another, &labels(), ours);
            v
        };
        // Its own annotations are read as they are.
        assert_eq!(shared("leader", Owner::Me, false), view("leader"));
        // Its leader: its own token; its since only while another election owns them.
        let leader = shared("leader", Owner::Another, false);
        assert_eq!(leader.fencing_token.as_deref(), Some("7"));
        assert_eq!(leader.leader_since, Some(since.to_string()));
        for owner in [Owner::Gone, Owner::Nobody] {
            let leader = shared("leader", owner, false);
            assert_eq!(leader.fencing_token.as_deref(), Some("7"));
            assert_eq!(
                leader.leader_since, None,
                "{owner:?}: labelled again to take them"
            );
        }
        // Another election's annotations on any other pod: none of its own.
        let follower = shared("follower", Owner::Another, false);
        assert_eq!(
            (follower.fencing_token, follower.leader_since),
            (None, None)
        );
        // Its follower with nobody's annotations is claimed again, unless another leads it.
        assert!(shared("follower", Owner::Nobody, false).reclaim);
        assert!(!shared("follower", Owner::Nobody, true).reclaim);
        assert!(!shared("follower", Owner::Gone, false).reclaim);
    }
}
