//! Cases 60-68: blocking queries.
//!
//! On the emulator, time is virtual: a case waits until the query is parked, moves the clock
//! and then checks whether the query answered. Against a real agent the same cases measure
//! wall time instead.

use std::time::{Duration, Instant};

use crate::target::{Needs, Target, answered, num, value_of};

const GUARD: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The upper bound of a blocking timeout `d` with Consul's jitter (`d + d/16`).
fn with_jitter(d: Duration) -> Duration {
    d + d / 16
}

/// Writes key `K` holding `v`; returns the key and its ModifyIndex.
async fn with_key(t: &Target) -> (String, u64) {
    let k = t.key("k");
    t.kv_put(&k, "", "v").await.assert_bool(true);
    let m = num(&t.kv(&k).await.expect("K"), "ModifyIndex");
    (k, m)
}

pub async fn case_60_blocking_get_times_out_after_wait_plus_jitter(t: &Target) {
    let (k, m) = with_key(t).await;
    let started = Instant::now();
    let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}&wait=1s"));
    t.parked(1).await;
    if !t.is_real() {
        t.elapse(ms(999)).await;
        t.parked(1).await;
        assert!(!h.is_finished(), "still blocking at 999ms");
        t.elapse(with_jitter(ms(1000)) - ms(999)).await;
    }
    let r = answered(h, GUARD).await;
    if t.is_real() {
        let took = started.elapsed();
        assert!(took >= ms(1000) && took <= ms(1400), "took {took:?}");
    }
    assert_eq!(r.status, 200);
    assert_eq!(r.index(), m);
    assert_eq!(value_of(&r.json()[0]), b"v");
}

pub async fn case_61_blocking_get_returns_when_the_key_changes(t: &Target) {
    let (k, m) = with_key(t).await;
    let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}&wait=60s"));
    t.parked(1).await;
    t.elapse(ms(500)).await;
    t.kv_put(&k, "", "w").await.assert_bool(true);
    let r = answered(h, GUARD).await;
    assert_eq!(r.status, 200);
    assert!(r.index() > m);
    assert_eq!(r.index(), num(&r.json()[0], "ModifyIndex"));
    assert_eq!(value_of(&r.json()[0]), b"w");
}

pub async fn case_62_writes_to_other_keys_do_not_wake_a_key_query(t: &Target) {
    let (k, m) = with_key(t).await;
    let started = Instant::now();
    let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}&wait=2s"));
    t.parked(1).await;
    t.kv_put(&t.key("k2"), "", "x").await.assert_bool(true);
    if !t.is_real() {
        t.parked(1).await;
        assert!(!h.is_finished(), "not woken by another key");
        t.elapse(with_jitter(ms(2000))).await;
    }
    let r = answered(h, GUARD).await;
    if t.is_real() {
        assert!(started.elapsed() >= ms(2000));
    }
    assert_eq!(r.index(), m, "index unchanged");
}

pub async fn case_63_blocking_on_a_missing_key_waits_for_that_key(t: &Target) {
    let absent = t.key("absent");
    let r = t.get(&format!("/v1/kv/{absent}")).await;
    assert_eq!(r.status, 404);
    let i = r.index();
    let h = t.spawn_get(&format!("/v1/kv/{absent}?index={i}&wait=5s"));
    t.parked(1).await;
    t.elapse(ms(1000)).await;
    let other = t.key("other");
    t.kv_put(&other, "", "x").await.assert_bool(true);
    if !t.version().at_least(1, 12) {
        // Before 1.12 the query answers as soon as the KV table's index moves: 404 with that
        // index (`docs/consul.md` §13, "Versions").
        let r = answered(h, GUARD).await;
        assert_eq!(r.status, 404);
        let written = num(&t.kv(&other).await.expect("other"), "ModifyIndex");
        assert_eq!(r.index(), written, "the KV table's index");
        return;
    }
    t.parked(1).await;
    assert!(!h.is_finished(), "a write elsewhere does not end it");
    t.elapse(ms(1000)).await;
    t.kv_put(&absent, "", "now").await.assert_bool(true);
    let r = answered(h, GUARD).await;
    assert_eq!(r.status, 200);
    assert_eq!(value_of(&r.json()[0]), b"now");
}

pub async fn case_64_bad_blocking_parameters_are_400(t: &Target) {
    let (k, _) = with_key(t).await;
    t.get(&format!("/v1/kv/{k}?wait=15"))
        .await
        .assert_error(400, "Invalid wait time");
    t.get(&format!("/v1/kv/{k}?index=abc"))
        .await
        .assert_error(400, "Invalid index");
    t.get(&format!("/v1/kv/{k}?stale&consistent"))
        .await
        .assert_error(
            400,
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        );
}

pub async fn case_65_an_index_from_the_future_blocks_then_returns_the_smaller_index(t: &Target) {
    let (k, m) = with_key(t).await;
    let h = t.spawn_get(&format!("/v1/kv/{k}?index=999999999999&wait=1s"));
    t.parked(1).await;
    if !t.is_real() {
        t.elapse(ms(999)).await;
        t.parked(1).await;
        assert!(!h.is_finished(), "blocks for the whole wait");
        t.elapse(with_jitter(ms(1000)) - ms(999)).await;
    }
    let r = answered(h, GUARD).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.index(), m, "the current, smaller index");
}

pub async fn case_66_wait_is_clamped_and_defaults_to_five_minutes(t: &Target) {
    if !t.supports(Needs::VirtualTime) {
        return;
    }
    let (k, m) = with_key(t).await;
    for (query, timeout) in [("&wait=20m", 600), ("", 300)] {
        let timeout = Duration::from_secs(timeout);
        let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}{query}"));
        t.parked(1).await;
        t.elapse(timeout - ms(1)).await;
        t.parked(1).await;
        assert!(
            !h.is_finished(),
            "{query:?}: blocking just before {timeout:?}"
        );
        t.elapse(with_jitter(timeout) - timeout + ms(1)).await;
        let r = answered(h, GUARD).await;
        assert_eq!(r.index(), m);
    }
}

pub async fn case_67_invalidation_wakes_a_watcher_of_the_held_key(t: &Target) {
    let s1 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), "v")
        .await
        .assert_bool(true);
    let m = num(&t.kv(&k).await.expect("K"), "ModifyIndex");
    let h = t.spawn_get(&format!("/v1/kv/{k}?index={m}&wait=60s"));
    t.parked(1).await;
    t.put(&format!("/v1/session/destroy/{s1}"), Vec::new())
        .await
        .assert_bool(true);
    let r = answered(h, GUARD).await;
    assert_eq!(r.status, 200);
    let e = &r.json()[0];
    assert!(e.get("Session").is_none(), "{e}");
    assert!(num(e, "ModifyIndex") > m);
}

pub async fn case_68_index_zero_is_not_blocking(t: &Target) {
    let (k, m) = with_key(t).await;
    let r = answered(
        t.spawn_get(&format!("/v1/kv/{k}?index=0&wait=10s")),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.index(), m);
}
