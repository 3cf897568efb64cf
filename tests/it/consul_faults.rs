//! Consul's own faults on a real Consul (`CONSUL_BIN`; skipped visibly without it): ACL tokens
//! lacking a right, and (in a three-server cluster) the Raft leader killed, the agent the
//! operator talks to restarted, and the whole cluster stopped and started. Every test ends
//! with the history check of [`Harness::finish`] (never two leader labels).

use crate::harness;

use std::time::{Duration, Instant};

use harness::{
    ConsulUnderTest, Harness, HarnessOptions, OperatorConsul, ROLE, condition, with_role,
};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::real_consul::{AclRules, Options, Shape};

/// Bound for waits that include a TTL and its consequences.
const TTL_BOUND: Duration = Duration::from_secs(45);
/// How long three servers on a loaded machine may take to elect a new Raft leader.
const RAFT_LEADER_BOUND: Duration = Duration::from_secs(120);

fn selecting(app: &str) -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": app}}, "session": {"ttl": "10s", "lockDelay": "1s"}})
}

/// The operator's token holds `rules` only; a second election with a token of its own (all
/// rights) shows that nothing else breaks. The refused election reports `ConsulAvailable`
/// false naming `right`, publishes one `ConsulRefused` event, labels nobody, and does not
/// retry in a tight loop.
async fn a_token_lacking_a_right(prefix: &str, rules: &str, right: &str) {
    let Some(consul) = ConsulUnderTest::real(
        Shape::Dev,
        Options {
            acl: true,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let real = consul.real_consul();
    let lacking = real
        .create_token("operator", &AclRules(rules.into()))
        .await
        .expect("token");
    let full = real
        .create_token("tenant", &AclRules::operator())
        .await
        .expect("token");
    with_namespace(prefix, |admin, ns| async move {
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                token: Some(lacking),
                ..OperatorConsul::default()
            },
            secret_access: true,
            ..HarnessOptions::default()
        };
        let mut h = Harness::with_consul(admin, ns, options, consul).await;
        h.deployment("web", 2).await;
        h.deployment("api", 2).await;
        h.token_secret("tenant-token", &full, "api").await;
        h.start_operator().await;
        h.election("web", selecting("web")).await;
        let mut api = selecting("api");
        api["consul"] = json!({"tokenSecretRef": {"name": "tenant-token", "key": "token"}});
        h.election("api", api).await;

        let refused = h
            .wait_status("web", |le| {
                condition(le, "ConsulAvailable")
                    .is_some_and(|c| c.status == "False" && c.reason == "PermissionDenied")
            })
            .await;
        let message = condition(&refused, "ConsulAvailable")
            .map(|c| c.message)
            .unwrap_or_default();
        assert!(message.contains(right), "{message}");
        let notes = h.wait_event("web", "ConsulRefused").await;
        assert!(notes.iter().any(|n| n.contains(right)), "{notes:?}");
        h.wait_elected("api", None).await;

        // No tight loop: over 10 s the refused election is tried again at most twice.
        let before = h.reconciles();
        let window = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during = h.reconciles() - before;
        eprintln!("{during} reconciles in 10 s while Consul refuses");
        assert!(
            during <= 3,
            "{during} reconciles in {:?} while Consul refuses",
            window.elapsed()
        );
        let (refusals, _) = h.events("web", "ConsulRefused").await;
        assert_eq!(refusals, 1, "one event for one refusal");
        let pods = h.current();
        let web_leaders: Vec<String> = with_role(&pods, "leader")
            .into_iter()
            .filter(|p| p.starts_with("web-"))
            .collect();
        assert!(web_leaders.is_empty(), "{web_leaders:?}");
        assert!(
            h.recorder
                .versions()
                .iter()
                .filter(|v| v.name.starts_with("web-"))
                .all(|v| v.labels.get(ROLE).map(String::as_str) != Some("leader")),
            "no web pod was ever labelled leader"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_session_write_is_reported_and_breaks_nothing_else() {
    a_token_lacking_a_right(
        "acl-session",
        r#"key_prefix "elector/" { policy = "write" }"#,
        "session:write",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_key_write_is_reported_and_breaks_nothing_else() {
    a_token_lacking_a_right(
        "acl-key",
        r#"key_prefix "elector/" { policy = "read" }
session_prefix "" { policy = "write" }"#,
        "key:write",
    )
    .await;
}

/// A three-server cluster with the operator on its client agent; `None` without
/// `CONSUL_BIN`.
async fn cluster() -> Option<ConsulUnderTest> {
    ConsulUnderTest::real(Shape::Cluster, Options::default()).await
}

/// Waits until a server other than `old` leads Raft; returns it and how long Raft had no
/// (other) leader.
async fn new_raft_leader(
    consul: &ConsulUnderTest,
    old: usize,
    since: Instant,
) -> (usize, Duration) {
    let leader = consul
        .real_consul()
        .wait_leader_other_than(old, RAFT_LEADER_BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (leader, since.elapsed())
}

/// The Raft leader is killed five times, each time together with the election's leader pod
/// (a failover that needs Consul writes exactly while Raft elects). With the default session
/// TTL (15 s), Consul's own election must cause no leader change: the only moves are the
/// five deletions, no session is lost, and the token only grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_leader_killed_during_failovers_causes_no_leader_change_of_its_own() {
    let Some(consul) = cluster().await else {
        return;
    };
    with_namespace("raft-kill", |admin, ns| async move {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        let (h, first) = Harness::web_elected_on(admin, ns, consul.clone(), spec).await;
        let real = consul.real_consul();
        let mut previous = first.clone();
        for round in 1..=5 {
            let raft = real.leader().await.expect("a Raft leader");
            let killed = Instant::now();
            real.members()[raft].kill();
            h.pods()
                .delete(&previous.pod, &Default::default())
                .await
                .expect("delete the leader pod");
            let ((next, moved), (_, leaderless)) = tokio::join!(
                async {
                    let next = h
                        .wait_elected_within("web", Some(&previous.pod), TTL_BOUND)
                        .await;
                    (next, killed.elapsed())
                },
                new_raft_leader(&consul, raft, killed)
            );
            eprintln!(
                "round {round}: Raft leader killed with the leader pod; Raft leader again \
                 after {leaderless:?}, new leader {} labelled after {moved:?}",
                next.pod
            );
            assert!(next.token > previous.token, "{next:?} after {previous:?}");
            real.members()[raft].restart().expect("restart");
            real.wait_ready(TTL_BOUND)
                .await
                .expect("cluster whole again");
            previous = next;
        }
        let status = h.status("web").await;
        assert_eq!(
            status.transitions - first.transitions,
            5,
            "only the five deletions moved the leader"
        );
        let (lost, notes) = h.events("web", "SessionLost").await;
        assert_eq!(lost, 0, "no session was lost: {notes:?}");
        let (unavailable, notes) = h.events("web", "ConsulUnavailable").await;
        assert_eq!(unavailable, 0, "no fence: {notes:?}");
        h.finish().await;
    })
    .await;
}

/// How the agent the operator talks to goes down.
#[derive(Debug, Clone, Copy)]
enum AgentDown {
    /// Killed (SIGKILL), as in a crash or an OOM kill: its node stays registered.
    Crash,
    /// Stopped with SIGTERM: a client agent leaves the cluster on SIGTERM by default
    /// (`leave_on_terminate`), and its node leaves the catalog with every session on it.
    Leave,
}

/// The agent the operator talks to goes down and comes back. Sessions belong to that agent's
/// node: after a crash they survive (they have no checks) and nothing changes; after a
/// graceful leave Consul destroys them with the node, and the election recovers by itself
/// once the agent is back.
async fn agent_restart(prefix: &str, down: AgentDown) {
    let Some(consul) = cluster().await else {
        return;
    };
    with_namespace(prefix, |admin, ns| async move {
        let (h, first) = Harness::web_elected_on(admin, ns, consul.clone(), selecting("web")).await;
        let agent = consul.real_consul().agent();
        let started = Instant::now();
        match down {
            AgentDown::Crash => agent.kill(),
            AgentDown::Leave => agent.stop(),
        }
        // Down for half a TTL: the operator's renewals fail meanwhile.
        tokio::time::sleep(Duration::from_secs(5)).await;
        agent.restart().expect("restart the agent");
        consul
            .real_consul()
            .wait_ready(TTL_BOUND)
            .await
            .expect("agent back");
        let back = started.elapsed();
        let session = h
            .consul("GET", &format!("/v1/session/info/{}", first.session), "")
            .await;
        let survived = session.status == 200 && session.json()[0]["ID"] == first.session;
        let after = h.wait_elected_within("web", None, TTL_BOUND).await;
        eprintln!(
            "{down:?}: agent back after {back:?}; the leader's session {}; leader {} -> {} \
             (token {} -> {}), {:?} after the agent went down",
            if survived {
                "survived"
            } else {
                "was destroyed"
            },
            first.pod,
            after.pod,
            first.token,
            after.token,
            started.elapsed()
        );
        match down {
            AgentDown::Crash => {
                assert!(survived, "a check-less session outlives an agent crash");
                assert_eq!(after, first, "nothing changed");
            }
            AgentDown::Leave => {
                assert!(
                    !survived,
                    "Consul destroys the node's sessions when it leaves"
                );
                assert!(after.token > first.token, "{after:?} after {first:?}");
            }
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_crashing_and_restarting_changes_nothing() {
    agent_restart("agent-crash", AgentDown::Crash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_leaving_and_rejoining_destroys_the_sessions_and_the_election_recovers() {
    agent_restart("agent-leave", AgentDown::Leave).await;
}

/// Every Consul process is killed (a power cut) for longer than two TTLs, then started again
/// from its data dir. The leader label goes within a TTL of the outage's start (rule 2: the
/// lock can no longer be confirmed), and the election is back afterwards without a manual step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_outage_fences_within_a_ttl_and_recovers_by_itself() {
    const TTL: Duration = Duration::from_secs(10);
    const SLACK: Duration = Duration::from_secs(3);
    let Some(consul) = cluster().await else {
        return;
    };
    with_namespace("outage", |admin, ns| async move {
        let (h, first) = Harness::web_elected_on(admin, ns, consul.clone(), selecting("web")).await;
        let real = consul.real_consul();
        let down = Instant::now();
        for member in real.members() {
            member.kill();
        }
        let fenced = h.leader_label_gone_after(&first.pod, down, TTL_BOUND).await;
        assert!(
            fenced <= TTL + SLACK,
            "the label stayed {fenced:?} into the outage (TTL {TTL:?})"
        );
        // The outage lasts more than two TTLs: every session's TTL has run out meanwhile.
        let outage = 2 * TTL + Duration::from_secs(5);
        tokio::time::sleep(outage.saturating_sub(down.elapsed())).await;
        for member in real.members() {
            member.restart().expect("restart");
        }
        real.wait_ready(Duration::from_secs(90))
            .await
            .expect("cluster back");
        let back = down.elapsed();
        let again = h
            .wait_elected_within("web", None, Duration::from_secs(90))
            .await;
        eprintln!(
            "outage: label gone after {fenced:?}; Consul back after {back:?}; elected again \
             after {:?}: {} (token {} -> {}, session {})",
            down.elapsed(),
            again.pod,
            first.token,
            again.token,
            if again.session == first.session {
                "kept"
            } else {
                "new"
            }
        );
        assert!(again.token >= first.token, "{again:?} after {first:?}");
        h.finish().await;
    })
    .await;
}

/// The operator's token is deleted while it leads: renewals are refused, the session runs
/// out, the label goes within a TTL of the deletion, and the election reports that Consul no
/// longer knows the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_token_fences_within_a_ttl_and_is_reported() {
    const TTL: Duration = Duration::from_secs(10);
    const SLACK: Duration = Duration::from_secs(3);
    let Some(consul) = ConsulUnderTest::real(
        Shape::Dev,
        Options {
            acl: true,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let token = consul
        .real_consul()
        .create_token("operator", &AclRules::operator())
        .await
        .expect("token");
    with_namespace("acl-deleted", |admin, ns| async move {
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                token: Some(token.clone()),
                ..OperatorConsul::default()
            },
            ..HarnessOptions::default()
        };
        let mut h = Harness::with_consul(admin, ns, options, consul.clone()).await;
        h.deployment("web", 2).await;
        h.start_operator().await;
        h.election("web", selecting("web")).await;
        let first = h.wait_elected("web", None).await;
        let deleted = Instant::now();
        consul
            .real_consul()
            .destroy_token(&token)
            .await
            .expect("destroy");
        let stayed = h
            .leader_label_gone_after(&first.pod, deleted, TTL_BOUND)
            .await;
        eprintln!("token deleted: leader label gone after {stayed:?}");
        assert!(stayed <= TTL + SLACK, "the label stayed {stayed:?}");
        let refused = h
            .wait_status_within("web", TTL_BOUND, |le| {
                condition(le, "ConsulAvailable").is_some_and(|c| c.reason == "AclTokenNotFound")
            })
            .await;
        let message = condition(&refused, "ConsulAvailable")
            .map(|c| c.message)
            .unwrap_or_default();
        assert!(message.contains("does not know the ACL token"), "{message}");
        h.finish().await;
    })
    .await;
}
