//! Cases 25-38: `?acquire=` and `?release=`.

use std::time::Duration;

use crate::target::{Target, num, value_of};

/// A key held by a fresh default session `S1`, with a second session `S2` ready.
struct Held<'a> {
    t: &'a Target,
    k: String,
    s1: String,
    s2: String,
}

async fn held<'a>(t: &'a Target, value: &str) -> Held<'a> {
    let s1 = t.default_session().await;
    let s2 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), value.to_owned())
        .await
        .assert_bool(true);
    Held { t, k, s1, s2 }
}

pub async fn case_25_acquire_creates_an_absent_key(t: &Target) {
    let s1 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), "v1")
        .await
        .assert_bool(true);
    let e = t.kv(&k).await.expect("K");
    assert_eq!(num(&e, "LockIndex"), 1);
    assert_eq!(e["Session"], s1.as_str());
    assert_eq!(e["Value"], "djE=");
    assert_eq!(num(&e, "Flags"), 0);
    assert_eq!(num(&e, "CreateIndex"), num(&e, "ModifyIndex"));
}

pub async fn case_26_acquire_of_a_key_held_by_another_session_fails(t: &Target) {
    let h = held(t, "v").await;
    let before = h.t.kv(&h.k).await.expect("K");
    h.t.kv_put(&h.k, &format!("acquire={}", h.s2), "x")
        .await
        .assert_bool(false);
    assert_eq!(h.t.kv(&h.k).await.expect("K"), before, "unchanged");
}

pub async fn case_27_reacquire_by_the_holder_keeps_the_lock_index(t: &Target) {
    let h = held(t, "v1").await;
    let before = h.t.kv(&h.k).await.expect("K");
    h.t.kv_put(&h.k, &format!("acquire={}", h.s1), "v2")
        .await
        .assert_bool(true);
    let after = h.t.kv(&h.k).await.expect("K");
    assert_eq!(num(&after, "LockIndex"), num(&before, "LockIndex"));
    assert_eq!(value_of(&after), b"v2");
    assert!(num(&after, "ModifyIndex") > num(&before, "ModifyIndex"));
}

pub async fn case_28_identical_reacquire_is_a_no_op_that_wakes_nobody(t: &Target) {
    let h = held(t, "v2").await;
    let before = h.t.kv(&h.k).await.expect("K");
    let modify = num(&before, "ModifyIndex");
    let watch = {
        let path = format!("/v1/kv/{}?index={modify}&wait=2s", h.k);
        let t = &h.t;
        async move { t.get(&path).await }
    };
    // From 1.6 an identical write is skipped by the state store (`docs/consul.md` §13,
    // "Versions"); before, it is a write like any other.
    let skipped = h.t.version().at_least(1, 6);
    let writer = async {
        h.t.parked(1).await;
        h.t.kv_put(&h.k, &format!("acquire={}", h.s1), "v2")
            .await
            .assert_bool(true);
        let after = num(&h.t.kv(&h.k).await.expect("K"), "ModifyIndex");
        if skipped {
            assert_eq!(after, modify, "no-op write");
        } else {
            assert!(after > modify, "the write moved ModifyIndex");
        }
        if !h.t.is_real() {
            // Still parked after the no-op write; only the wait's end releases it.
            h.t.parked(1).await;
            h.t.elapse(Duration::from_millis(2125)).await;
        }
        after
    };
    let started = std::time::Instant::now();
    let (resp, after) = tokio::join!(watch, writer);
    assert_eq!(resp.status, 200);
    if skipped {
        assert_eq!(
            resp.index(),
            modify,
            "the blocking GET was not woken by a change"
        );
    } else {
        assert_eq!(resp.index(), after, "the write woke the blocking GET");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "woken before its wait ended"
        );
    }
}

pub async fn case_29_acquire_of_an_unlocked_key_increments_the_lock_index(t: &Target) {
    let h = held(t, "v").await;
    // Two more release/acquire rounds bring LockIndex to 3, then release it.
    for _ in 0..2 {
        h.t.kv_put(&h.k, &format!("release={}", h.s1), "v")
            .await
            .assert_bool(true);
        h.t.kv_put(&h.k, &format!("acquire={}", h.s1), "v")
            .await
            .assert_bool(true);
    }
    h.t.kv_put(&h.k, &format!("release={}", h.s1), "v")
        .await
        .assert_bool(true);
    assert_eq!(num(&h.t.kv(&h.k).await.expect("K"), "LockIndex"), 3);
    h.t.kv_put(&h.k, &format!("acquire={}", h.s2), "v")
        .await
        .assert_bool(true);
    let e = h.t.kv(&h.k).await.expect("K");
    assert_eq!(num(&e, "LockIndex"), 4);
    assert_eq!(e["Session"], h.s2.as_str());
}

pub async fn case_30_acquire_with_a_session_that_never_existed_is_500(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "v").await.assert_bool(true);
    let before = t.kv(&k).await.expect("K");
    let bogus = "11111111-2222-3333-4444-555555555555";
    t.kv_put(&k, &format!("acquire={bogus}"), "x")
        .await
        .assert_error(500, &format!("invalid session \"{bogus}\""));
    assert_eq!(t.kv(&k).await.expect("K"), before, "unchanged");
}

pub async fn case_31_acquire_with_an_empty_session_is_500(t: &Target) {
    t.kv_put(&t.key("k"), "acquire=", "v")
        .await
        .assert_error(500, "missing session");
}

pub async fn case_32_acquire_with_cas_is_conflicting(t: &Target) {
    let s1 = t.default_session().await;
    let r = t
        .kv_put(&t.key("k"), &format!("acquire={s1}&cas=5"), "v")
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().starts_with("Conflicting flags:"), "{}", r.text());
}

pub async fn case_33_flags_are_replaced_on_every_acquire(t: &Target) {
    let s1 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}&flags=42"), "v")
        .await
        .assert_bool(true);
    assert_eq!(num(&t.kv(&k).await.expect("K"), "Flags"), 42);
    t.kv_put(&k, &format!("acquire={s1}"), "v")
        .await
        .assert_bool(true);
    assert_eq!(num(&t.kv(&k).await.expect("K"), "Flags"), 0);
}

pub async fn case_34_release_unlocks_without_lock_delay(t: &Target) {
    let h = held(t, "v").await;
    let before = h.t.kv(&h.k).await.expect("K");
    h.t.kv_put(&h.k, &format!("release={}", h.s1), "bye")
        .await
        .assert_bool(true);
    let e = h.t.kv(&h.k).await.expect("K");
    assert!(e.get("Session").is_none(), "{e}");
    assert_eq!(num(&e, "LockIndex"), 1);
    assert_eq!(value_of(&e), b"bye");
    assert!(num(&e, "ModifyIndex") > num(&before, "ModifyIndex"));
    h.t.kv_put(&h.k, &format!("acquire={}", h.s2), "x")
        .await
        .assert_bool(true);
    assert_eq!(num(&h.t.kv(&h.k).await.expect("K"), "LockIndex"), 2);
}

pub async fn case_35_release_by_a_non_holder_fails(t: &Target) {
    let h = held(t, "v").await;
    let before = h.t.kv(&h.k).await.expect("K");
    h.t.kv_put(&h.k, &format!("release={}", h.s2), "x")
        .await
        .assert_bool(false);
    assert_eq!(h.t.kv(&h.k).await.expect("K"), before);
}

pub async fn case_36_release_of_absent_or_unlocked_key_fails(t: &Target) {
    let s1 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("release={s1}"), "x")
        .await
        .assert_bool(false);
    assert!(t.kv(&k).await.is_none(), "release creates nothing");
    t.kv_put(&k, "", "v").await.assert_bool(true);
    t.kv_put(&k, &format!("release={s1}"), "x")
        .await
        .assert_bool(false);
}

pub async fn case_37_release_with_an_empty_body_clears_the_value(t: &Target) {
    let h = held(t, "v").await;
    h.t.kv_put(&h.k, &format!("release={}", h.s1), Vec::new())
        .await
        .assert_bool(true);
    let raw = h.t.get(&format!("/v1/kv/{}", h.k)).await;
    assert!(raw.json()[0]["Value"].is_null(), "{}", raw.text());
}

pub async fn case_38_release_with_an_empty_session_is_500(t: &Target) {
    t.kv_put(&t.key("k"), "release=", "v")
        .await
        .assert_error(500, "missing session");
}
