//! Cases 76-78: a change of the Raft leader. Against a real Consul each case has a cluster of
//! three servers and kills members; on the emulator the leader switch (`set_leader`) stands in
//! for an election that has not finished.

use std::time::{Duration, Instant};

use testkit::real_consul::RealConsul;

use crate::target::{Resp, Target, answered, num};

/// How long a real cluster may take to elect a leader or to expire a session.
const BOUND: Duration = Duration::from_secs(60);

/// A real cluster's members by role: the leader and the two followers.
struct Roles {
    leader: usize,
    followers: [usize; 2],
}

async fn roles(consul: &RealConsul) -> Roles {
    let leader = consul.leader().await.expect("the cluster has a leader");
    let mut others = (0..consul.members().len()).filter(|i| *i != leader);
    let followers = [
        others.next().expect("a follower"),
        others.next().expect("a second follower"),
    ];
    Roles { leader, followers }
}

/// Waits until some member other than `old` leads; returns it and when it was seen.
async fn new_leader(consul: &RealConsul, old: usize) -> (usize, Instant) {
    let leader = consul
        .wait_leader_other_than(old, BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (leader, Instant::now())
}

/// `PUT /v1/session/renew/<id>` on the agent at `base`.
async fn renew_at(t: &Target, base: &str, id: &str) -> Resp {
    t.req_at(base, "PUT", &format!("/v1/session/renew/{id}"), "", &[])
        .await
}

/// Creates a session on the agent at `base` (its own node, default checks).
/// A session bound to no health check, as the operator creates them (`NodeChecks` from 1.7,
/// `Checks` before): these cases are about leader changes, and on a loaded machine the
/// members' gossip may mark the follower's own node failed for a moment, which would
/// invalidate a session bound to its `serfHealth` (seen once in case 76 on 1.8.7: 404).
const CHECKLESS: &str = r#"{"NodeChecks":[],"Checks":[]}"#;
/// [`CHECKLESS`] with a TTL of 10 s.
const CHECKLESS_TTL_10S: &str = r#"{"TTL":"10s","NodeChecks":[],"Checks":[]}"#;

async fn session_at(t: &Target, base: &str, body: &str) -> String {
    let r = t
        .req_at(base, "PUT", "/v1/session/create", body.to_owned(), &[])
        .await;
    assert_eq!(r.status, 200, "create session {body}: {}", r.text());
    r.json()["ID"].as_str().expect("ID").to_owned()
}

/// Whether session `id` exists, asked of the agent at `base`.
async fn alive_at(t: &Target, base: &str, id: &str) -> bool {
    let r = t
        .req_at(base, "GET", &format!("/v1/session/info/{id}"), "", &[])
        .await;
    assert_eq!(r.status, 200, "info: {}", r.text());
    !r.json().as_array().expect("info array").is_empty()
}

/// A renewal while no leader can be elected answers 500 `No cluster leader`; once a leader is
/// back, the same renewal succeeds.
pub async fn case_76_renew_without_a_leader_is_500_no_cluster_leader(t: &Target) {
    let Some(consul) = t.real() else {
        let id = t.default_session().await;
        t.emu().set_leader(false);
        renew_at(t, &t.url(), &id)
            .await
            .assert_error(500, "No cluster leader");
        t.emu().set_leader(true);
        assert_eq!(renew_at(t, &t.url(), &id).await.status, 200);
        return;
    };
    let roles = roles(consul).await;
    let [follower, other] = roles.followers.map(|i| &consul.members()[i]);
    let id = session_at(t, &follower.url(), CHECKLESS).await;
    let r = renew_at(t, &follower.url(), &id).await;
    assert_eq!(r.status, 200, "a follower forwards a renewal: {}", r.text());
    // Two of three servers down: no quorum, so no leader can be elected.
    consul.members()[roles.leader].kill();
    other.kill();
    // Until the follower notices that its leader is gone it forwards to the dead address and
    // reports that connection's failure; then it waits for a leader (the RPC hold timeout) and
    // answers `No cluster leader`.
    let deadline = Instant::now() + BOUND;
    loop {
        let r = renew_at(t, &follower.url(), &id).await;
        assert_eq!(r.status, 500, "no leader: {}", r.text());
        if r.text().contains("No cluster leader") {
            break;
        }
        assert!(
            r.text().contains("rpc error"),
            "a failed forward to the old leader: {}",
            r.text()
        );
        assert!(
            Instant::now() < deadline,
            "never answered No cluster leader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    other.restart().expect("restart a follower");
    consul.wait_ready(BOUND).await.expect("a leader again");
    let r = renew_at(t, &follower.url(), &id).await;
    assert_eq!(r.status, 200, "renewed under the new leader: {}", r.text());
    assert_eq!(r.json()[0]["ID"], id.as_str());
}

/// A blocking read on a follower while the leader it forwarded to dies: before 1.9 it fails at
/// once with the broken connection's `EOF`; from 1.9 the follower sends it again, and it
/// either keeps blocking under the new leader (the second send reached it) or fails with a 500
/// naming the failed forward (it dialled the dead leader again: what 1.15.10 answered), never a
/// 200 without a write (`docs/consul.md` §13, "Versions").
pub async fn case_77_a_blocking_read_across_a_leader_change(t: &Target) {
    let k = t.key("k");
    let Some(consul) = t.real() else {
        t.kv_put(&k, "", "v").await.assert_bool(true);
        let m = num(&t.kv(&k).await.expect("K"), "ModifyIndex");
        let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}&wait=10s"));
        t.parked(1).await;
        t.emu().simulate_leader_election();
        t.parked(1).await;
        assert!(!h.is_finished(), "still blocking after the election");
        t.kv_put(&k, "", "w").await.assert_bool(true);
        let r = answered(h, Duration::from_secs(10)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.index() > m);
        return;
    };
    let roles = roles(consul).await;
    let follower = consul.members()[roles.followers[0]].url();
    let r = t
        .req_at(&follower, "PUT", &format!("/v1/kv/{k}"), "v", &[])
        .await;
    r.assert_bool(true);
    let r = t
        .req_at(&follower, "GET", &format!("/v1/kv/{k}"), "", &[])
        .await;
    let m = num(&r.json()[0], "ModifyIndex");
    let h = t.spawn_get_at(&follower, &format!("/v1/kv/{k}?index={m}&wait=30s"));
    t.parked(1).await;
    let killed = Instant::now();
    consul.members()[roles.leader].kill();
    if !t.version().at_least(1, 9) {
        let r = answered(h, BOUND).await;
        r.assert_error(500, "EOF");
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "failed at once, not at the end of its wait"
        );
        return;
    }
    new_leader(consul, roles.leader).await;
    if h.is_finished() {
        let r = answered(h, BOUND).await;
        r.assert_error(500, "rpc error");
        return;
    }
    let r = t
        .req_at(&follower, "PUT", &format!("/v1/kv/{k}"), "w", &[])
        .await;
    r.assert_bool(true);
    let r = answered(h, BOUND).await;
    if r.status == 500 {
        // It failed between the new leader's election and the write.
        r.assert_error(500, "rpc error");
        return;
    }
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.index() > m, "woken by the write");
}

/// A session renewed shortly before its TTL would run out survives a leader change by a whole
/// TTL counted from the new leader, which restarts every TTL timer.
pub async fn case_78_a_new_leader_restarts_every_ttl_timer(t: &Target) {
    let ttl = Duration::from_secs(10);
    let Some(consul) = t.real() else {
        let id = t.session(r#"{"TTL":"10s"}"#).await;
        t.elapse(Duration::from_secs(12)).await;
        t.emu().set_leader(false);
        t.elapse(Duration::from_secs(2)).await;
        t.emu().set_leader(true);
        // The old timer would have fired at 20 s; the new leader's fires at 14 s + 2 × TTL.
        t.elapse(2 * ttl - Duration::from_millis(1)).await;
        assert!(
            alive_at(t, &t.url(), &id).await,
            "alive just before 2 × TTL"
        );
        t.elapse(Duration::from_millis(1)).await;
        assert!(!alive_at(t, &t.url(), &id).await, "gone at 2 × TTL");
        return;
    };
    let roles = roles(consul).await;
    let follower = consul.members()[roles.followers[0]].url();
    let id = session_at(t, &follower, CHECKLESS_TTL_10S).await;
    let renewed = Instant::now();
    assert_eq!(renew_at(t, &follower, &id).await.status, 200);
    // The server invalidates at 2 × TTL after the renewal; kill the leader well before.
    tokio::time::sleep(ttl + ttl / 5).await;
    consul.members()[roles.leader].kill();
    let (_, elected) = new_leader(consul, roles.leader).await;
    // Past the old deadline (renewal + 2 × TTL) and a full TTL after the new leader.
    let check = (renewed + 2 * ttl + Duration::from_secs(3)).max(elected + ttl);
    tokio::time::sleep_until(check.into()).await;
    assert!(
        alive_at(t, &follower, &id).await,
        "alive {:?} after the renewal, {:?} after the new leader",
        check - renewed,
        check - elected
    );
    // It still expires: within 2 × TTL of the new leader, plus the reaper's latency.
    let deadline = elected + 2 * ttl + Duration::from_secs(10);
    while alive_at(t, &follower, &id).await {
        assert!(Instant::now() < deadline, "the session never expired");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "case 78: expired {:?} after the new leader",
        elected.elapsed()
    );
}
