//! Cases 39-46: session invalidation effects and lock-delay.

use std::time::Duration;

use testkit::consul::CheckStatus;

use crate::target::{Needs, Target, num, value_of};

const SEC: Duration = Duration::from_secs(1);

/// `S1` (created from `s1_body`) holds `K` with value `v`; `S2` is a default session.
struct Setup<'a> {
    t: &'a Target,
    k: String,
    s1: String,
    s2: String,
}

async fn setup<'a>(t: &'a Target, s1_body: &str) -> Setup<'a> {
    let s1 = t.session(s1_body).await;
    let s2 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), "v")
        .await
        .assert_bool(true);
    Setup { t, k, s1, s2 }
}

impl Setup<'_> {
    async fn destroy_s1(&self) -> u64 {
        self.t
            .put(&format!("/v1/session/destroy/{}", self.s1), Vec::new())
            .await
            .assert_bool(true);
        self.t.sessions_index().await
    }

    async fn acquire_s2(&self) -> bool {
        let r = self
            .t
            .kv_put(&self.k, &format!("acquire={}", self.s2), "v2")
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        r.text().trim() == "true"
    }
}

pub async fn case_39_destroy_releases_and_arms_the_lock_delay(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"15s"}"#).await;
    let d = s.destroy_s1().await;
    let e = s.t.kv(&s.k).await.expect("K kept");
    assert!(e.get("Session").is_none(), "{e}");
    assert_eq!(num(&e, "LockIndex"), 1);
    assert_eq!(value_of(&e), b"v");
    assert_eq!(num(&e, "ModifyIndex"), d, "released at the destroy index");
    s.t.elapse(SEC).await;
    assert!(!s.acquire_s2().await, "refused during lock-delay");
    s.t.elapse_past(14 * SEC).await;
    assert!(s.acquire_s2().await, "free once the delay ends");
    assert_eq!(num(&s.t.kv(&s.k).await.expect("K"), "LockIndex"), 2);
}

pub async fn case_40_lock_delay_answers_false_before_validating_the_session(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"15s"}"#).await;
    s.destroy_s1().await;
    s.t.kv_put(&s.k, "acquire=11111111-2222-3333-4444-555555555555", "x")
        .await
        .assert_bool(false);
}

pub async fn case_41_lock_delay_blocks_only_acquire(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"15s"}"#).await;
    s.destroy_s1().await;
    s.t.kv_put(&s.k, "", "x").await.assert_bool(true);
    let m = num(&s.t.kv(&s.k).await.expect("K"), "ModifyIndex");
    s.t.kv_put(&s.k, &format!("cas={m}"), "y")
        .await
        .assert_bool(true);
    s.t.delete(&format!("/v1/kv/{}", s.k))
        .await
        .assert_bool(true);
    assert!(s.t.kv(&s.k).await.is_none());
}

pub async fn case_42_delete_behavior_removes_the_key(t: &Target) {
    let s = setup(t, r#"{"Behavior":"delete","LockDelay":"15s"}"#).await;
    let before = s.t.kv(&s.k).await.expect("K");
    let d = s.destroy_s1().await;
    let r = s.t.get(&format!("/v1/kv/{}", s.k)).await;
    assert_eq!(r.status, 404);
    assert!(r.index() >= d, "index {} >= destroy index {d}", r.index());
    assert!(!s.acquire_s2().await, "lock-delay covers re-creation");
    s.t.elapse_past(15 * SEC).await;
    assert!(s.acquire_s2().await);
    let e = s.t.kv(&s.k).await.expect("re-created");
    assert_eq!(num(&e, "LockIndex"), 1);
    assert!(num(&e, "CreateIndex") > num(&before, "CreateIndex"));
}

pub async fn case_43_zero_lock_delay_frees_the_key_at_once(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"0s"}"#).await;
    s.destroy_s1().await;
    assert!(s.acquire_s2().await);
}

pub async fn case_44_lock_delay_is_capped_at_sixty_seconds(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"120s"}"#).await;
    if !s.t.supports(Needs::VirtualTime) {
        return;
    }
    s.destroy_s1().await;
    s.t.elapse(59 * SEC).await;
    assert!(!s.acquire_s2().await, "refused at +59s");
    s.t.elapse(SEC).await;
    assert!(s.acquire_s2().await, "free at +60s");
}

pub async fn case_45_critical_check_releases_every_key_in_one_index(t: &Target) {
    if !t.supports(Needs::CatalogHooks) {
        return;
    }
    let s1 = t.default_session().await;
    let s2 = t.session(r#"{"NodeChecks":[]}"#).await;
    let (k1, k2) = (t.key("k1"), t.key("k2"));
    for k in [&k1, &k2] {
        t.kv_put(k, &format!("acquire={s1}"), "v")
            .await
            .assert_bool(true);
    }
    t.emu()
        .set_check_status("node1", "serfHealth", CheckStatus::Critical);
    assert_eq!(t.info(&s1).await, serde_json::json!([]), "S1 is gone");
    let e1 = t.kv(&k1).await.expect("K1");
    let e2 = t.kv(&k2).await.expect("K2");
    assert!(e1.get("Session").is_none() && e2.get("Session").is_none());
    assert_eq!(
        num(&e1, "ModifyIndex"),
        num(&e2, "ModifyIndex"),
        "one index"
    );
    for k in [&k1, &k2] {
        t.kv_put(k, &format!("acquire={s2}"), "x")
            .await
            .assert_bool(false);
    }
}

pub async fn case_46_release_before_destroy_leaves_no_lock_delay(t: &Target) {
    let s = setup(t, r#"{"LockDelay":"15s"}"#).await;
    s.t.kv_put(&s.k, &format!("release={}", s.s1), "v")
        .await
        .assert_bool(true);
    s.destroy_s1().await;
    assert!(s.acquire_s2().await);
}
