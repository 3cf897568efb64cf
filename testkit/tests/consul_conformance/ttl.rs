//! Cases 21-24: TTL enforcement at exactly multiplier x TTL after the last create, renew or
//! leader election (emulator with multiplier 2, virtual time).

use std::time::Duration;

use crate::target::{Needs, Target, num, value_of};

const MS: Duration = Duration::from_millis(1);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

async fn alive(t: &Target, id: &str) -> bool {
    let info = t.info(id).await;
    !info.as_array().expect("info array").is_empty()
}

pub async fn case_21_unrenewed_session_expires_at_twice_the_ttl(t: &Target) {
    let id = t.session(r#"{"TTL":"10s"}"#).await;
    if !t.supports(Needs::VirtualTime) {
        // Against real Consul only "exists before TTL" is guaranteed.
        assert!(alive(t, &id).await);
        return;
    }
    t.elapse(secs(19.9)).await;
    assert!(alive(t, &id).await, "alive at t=19.9s");
    t.elapse(secs(0.1)).await;
    assert!(!alive(t, &id).await, "gone at t=20s");
}

pub async fn case_22_renew_rearms_the_timer(t: &Target) {
    if !t.supports(Needs::VirtualTime) {
        return;
    }
    let id = t.session(r#"{"TTL":"10s"}"#).await;
    t.elapse(secs(15.0)).await;
    let r = t.put(&format!("/v1/session/renew/{id}"), Vec::new()).await;
    assert_eq!(r.status, 200);
    t.elapse(secs(19.9)).await;
    assert!(alive(t, &id).await, "alive at t=34.9s");
    t.elapse(secs(0.1)).await;
    assert!(!alive(t, &id).await, "gone at t=35s");
}

pub async fn case_23_expiry_releases_the_key_and_starts_lock_delay(t: &Target) {
    if !t.supports(Needs::VirtualTime) {
        return;
    }
    let s1 = t.session(r#"{"TTL":"10s"}"#).await;
    let s2 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), "v")
        .await
        .assert_bool(true);
    let before = t.kv(&k).await.expect("K");

    t.elapse(secs(20.0)).await;
    assert!(!alive(t, &s1).await);
    let expiry_index = t.sessions_index().await;
    let after = t.kv(&k).await.expect("K kept (release behavior)");
    assert!(after.get("Session").is_none(), "no Session: {after}");
    assert_eq!(num(&after, "LockIndex"), num(&before, "LockIndex"));
    assert_eq!(value_of(&after), b"v");
    assert_eq!(num(&after, "ModifyIndex"), expiry_index);
    t.kv_put(&k, &format!("acquire={s2}"), "x")
        .await
        .assert_bool(false);
    // The delay is measured from the expiry instant: 15 s later the key is free again.
    t.elapse(secs(15.0) - MS).await;
    t.kv_put(&k, &format!("acquire={s2}"), "x")
        .await
        .assert_bool(false);
    t.elapse(MS).await;
    t.kv_put(&k, &format!("acquire={s2}"), "x")
        .await
        .assert_bool(true);
}

pub async fn case_24_leader_election_rearms_every_ttl_timer(t: &Target) {
    if !t.supports(Needs::VirtualTime) {
        return;
    }
    let id = t.session(r#"{"TTL":"10s"}"#).await;
    t.elapse(secs(15.0)).await;
    t.emu().simulate_leader_election();
    t.elapse(secs(19.9)).await;
    assert!(alive(t, &id).await, "alive at t=34.9s");
    t.elapse(secs(0.1)).await;
    assert!(!alive(t, &id).await, "gone at t=35s");
}
