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

/// What one election knows of a pod it is about to patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedPod {
    /// Another existing election owns the pod's annotations; `Some(true)` when that election
    /// labels the pod leader.
    pub foreign_owner_leads: Option<bool>,
    /// The annotations name this election as their owner.
    pub owned_by_me: bool,
    /// Another election, writing another label key, labels the pod leader.
    pub led_by_another: bool,
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
}
