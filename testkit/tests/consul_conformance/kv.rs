//! Cases 47-59: plain PUT, CAS, DELETE and the GET variants.

use crate::target::{Needs, Target, num, value_of};

pub async fn case_47_plain_put_on_a_held_key_keeps_the_session_but_resets_lock_index(t: &Target) {
    let s1 = t.default_session().await;
    let k = t.key("k");
    t.kv_put(&k, &format!("acquire={s1}"), "v")
        .await
        .assert_bool(true);
    t.kv_put(&k, "", "z").await.assert_bool(true);
    let e = t.kv(&k).await.expect("K");
    assert_eq!(e["Session"], s1.as_str());
    assert_eq!(num(&e, "LockIndex"), 0);
    assert_eq!(value_of(&e), b"z");
}

pub async fn case_48_cas_zero_creates_only_when_absent(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "cas=0", "a").await.assert_bool(true);
    t.kv_put(&k, "cas=0", "b").await.assert_bool(false);
    assert_eq!(value_of(&t.kv(&k).await.expect("K")), b"a");
}

pub async fn case_49_cas_compares_the_modify_index(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "a").await.assert_bool(true);
    let m = num(&t.kv(&k).await.expect("K"), "ModifyIndex");
    t.kv_put(&k, &format!("cas={m}"), "b")
        .await
        .assert_bool(true);
    t.kv_put(&k, &format!("cas={m}"), "c")
        .await
        .assert_bool(false);
    assert_eq!(value_of(&t.kv(&k).await.expect("K")), b"b");
    let new = t.key("new");
    t.kv_put(&new, "cas=7", "x").await.assert_bool(false);
    assert!(t.kv(&new).await.is_none());
}

pub async fn case_50_non_numeric_cas_or_flags_is_500(t: &Target) {
    let k = t.key("k");
    let r = t.kv_put(&k, "cas=abc", "x").await;
    assert_eq!(r.status, 500, "{}", r.text());
    let r = t.kv_put(&k, "flags=-1", "x").await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(t.kv(&k).await.is_none());
}

pub async fn case_51_delete_with_cas(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "a").await.assert_bool(true);
    let m = num(&t.kv(&k).await.expect("K"), "ModifyIndex");
    t.delete(&format!("/v1/kv/{k}?cas={}", m + 1000))
        .await
        .assert_bool(false);
    t.delete(&format!("/v1/kv/{k}?cas=0"))
        .await
        .assert_bool(false);
    assert!(
        t.kv(&k).await.is_some(),
        "stale and zero cas delete nothing"
    );
    t.delete(&format!("/v1/kv/{k}?cas={m}"))
        .await
        .assert_bool(true);
    assert!(t.kv(&k).await.is_none());
    t.delete(&format!("/v1/kv/{}?cas=0", t.key("absent")))
        .await
        .assert_bool(true);
}

pub async fn case_52_delete_absent_recurse_and_conflicting_flags(t: &Target) {
    t.delete(&format!("/v1/kv/{}", t.key("absent")))
        .await
        .assert_bool(true);
    let (a, b) = (t.key("p/a"), t.key("p/b"));
    t.kv_put(&a, "", "1").await.assert_bool(true);
    t.kv_put(&b, "", "2").await.assert_bool(true);
    t.delete(&format!("/v1/kv/{}?recurse", t.key("p/")))
        .await
        .assert_bool(true);
    assert!(t.kv(&a).await.is_none() && t.kv(&b).await.is_none());
    let r = t
        .delete(&format!("/v1/kv/{}?recurse&cas=1", t.key("p/")))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().starts_with("Conflicting flags:"), "{}", r.text());
}

pub async fn case_53_value_size_limit_is_inclusive(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", vec![b'a'; 524_288])
        .await
        .assert_bool(true);
    let r = t.kv_put(&k, "", vec![b'a'; 524_289]).await;
    assert_eq!(r.status, 413);
    // The text names the request size from 1.8 on (`docs/consul.md` §13, "Versions").
    let expected = if t.version().at_least(1, 8) {
        "Request body(524289 bytes) too large, max size: 524288 bytes."
    } else {
        "Value exceeds 524288 byte limit"
    };
    assert!(r.text().starts_with(expected), "{}", r.text());
    assert_eq!(value_of(&t.kv(&k).await.expect("K")).len(), 524_288);
}

pub async fn case_54_missing_key_is_404_with_meta_headers(t: &Target) {
    let r = t.get(&format!("/v1/kv/{}", t.key("absent"))).await;
    assert_eq!(r.status, 404);
    assert!(r.body.is_empty(), "empty body: {:?}", r.text());
    assert!(r.index() >= 1);
    assert_eq!(r.header("X-Consul-KnownLeader").as_deref(), Some("true"));
    assert_eq!(r.header("X-Consul-LastContact").as_deref(), Some("0"));
}

pub async fn case_55_get_returns_an_array_and_the_key_index(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "v").await.assert_bool(true);
    // Another write afterwards must not change the index reported for K.
    t.kv_put(&t.key("other"), "", "w").await.assert_bool(true);
    let r = t.get(&format!("/v1/kv/{k}")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Content-Type").as_deref(),
        Some("application/json")
    );
    let arr = r.json();
    assert_eq!(arr.as_array().map(Vec::len), Some(1));
    assert_eq!(r.index(), num(&arr[0], "ModifyIndex"));
    assert_eq!(arr[0]["Key"], k.as_str());
}

pub async fn case_56_raw_returns_the_bytes(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "hello raw").await.assert_bool(true);
    let r = t.get(&format!("/v1/kv/{k}?raw")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello raw");
    assert!(
        r.header("Content-Type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{:?}",
        r.header("Content-Type")
    );
    let absent = t.get(&format!("/v1/kv/{}?raw", t.key("absent"))).await;
    assert_eq!(absent.status, 404, "missing key with raw");
}

pub async fn case_57_recurse_and_keys_on_missing_prefixes(t: &Target) {
    assert_eq!(
        t.get(&format!("/v1/kv/{}?recurse", t.key("nomatch/")))
            .await
            .status,
        404
    );
    assert_eq!(
        t.get(&format!("/v1/kv/{}?keys", t.key("nomatch/")))
            .await
            .status,
        404
    );
    if t.supports(Needs::EmptyStore) {
        let r = t.get("/v1/kv/?keys").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json(), serde_json::json!([]));
    }
}

pub async fn case_58_keys_with_separator_truncates_and_deduplicates(t: &Target) {
    for k in ["a/b/c", "a/b/e", "a/d"] {
        t.kv_put(&t.key(k), "", "v").await.assert_bool(true);
    }
    let r = t
        .get(&format!("/v1/kv/{}?keys&separator=/", t.key("a/")))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!([t.key("a/b/"), t.key("a/d")]));
}

pub async fn case_59_get_without_key_is_400(t: &Target) {
    t.get("/v1/kv/").await.assert_error(400, "Missing key name");
}
