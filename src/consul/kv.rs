//! KV API: get (optionally blocking), recursive get, acquire, release, CAS, put, delete.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::client::{Call, ConsulClient, Reply, api_path};
use super::error::{ConsulError, ErrorContext, Result};
use super::query::{QueryOptions, QueryResult};

/// A KV entry as Consul returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPair {
    /// Incremented each time an unlocked key is acquired: a fencing token.
    #[serde(rename = "LockIndex", default)]
    pub lock_index: u64,
    /// The key.
    #[serde(rename = "Key")]
    pub key: String,
    /// Opaque flags (full 64-bit range).
    #[serde(rename = "Flags", default)]
    pub flags: u64,
    /// The value (Consul sends base64, or `null` for an empty value).
    #[serde(rename = "Value", default, with = "base64_value")]
    pub value: Vec<u8>,
    /// The session holding the lock; omitted (`None`) when the key is not locked.
    #[serde(
        rename = "Session",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub session: Option<String>,
    /// Raft index of the creation.
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
}

/// The `Value` field: standard base64 with padding, `null` for empty.
mod base64_value {
    use super::*;

    pub(super) fn serialize<S: Serializer>(value: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        if value.is_empty() {
            serializer.serialize_none()
        } else {
            serializer.serialize_str(&STANDARD.encode(value))
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            Some(text) => STANDARD
                .decode(text.as_bytes())
                .map_err(serde::de::Error::custom),
            None => Ok(Vec::new()),
        }
    }
}

fn empty_as_none<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.filter(|s| !s.is_empty()))
}

/// The undecoded body of a KV read (a JSON array of entries, or nothing for a 404), so that
/// a reader holding the previous answer decodes only the entries that changed: parsing the
/// list borrows from the body ([`KvList::entries`]), and the base64 of a value is decoded
/// only by [`KvEntry::decode`].
#[derive(Debug, Clone)]
pub struct KvList {
    /// `None` for a 404 (no entry).
    body: Option<Bytes>,
    context: ErrorContext,
}

impl KvList {
    /// The entries, borrowed from the body; a [`ConsulError::Decode`] when the body is not a
    /// list of entries (a value's base64 is only checked by [`KvEntry::decode`]).
    pub fn entries(&self) -> Result<Vec<KvEntry<'_>>> {
        let Some(body) = &self.body else {
            return Ok(Vec::new());
        };
        serde_json::from_slice::<Option<Vec<KvEntry<'_>>>>(body)
            .map(Option::unwrap_or_default)
            .map_err(|error| self.decode_error(error.to_string()))
    }

    /// Every entry, decoded.
    pub fn decode_all(&self) -> Result<Vec<KvPair>> {
        self.entries()?
            .into_iter()
            .map(|entry| entry.decode(self))
            .collect()
    }

    /// A list holding `pairs` (as Consul would send them), for tests and emulations.
    pub fn from_pairs(pairs: &[KvPair], context: ErrorContext) -> KvList {
        KvList {
            body: serde_json::to_vec(pairs).ok().map(Bytes::from),
            context,
        }
    }

    /// A list holding the JSON `body` as Consul would send it, for tests and emulations.
    pub fn from_json(body: &str, context: ErrorContext) -> KvList {
        KvList {
            body: Some(Bytes::copy_from_slice(body.as_bytes())),
            context,
        }
    }

    fn decode_error(&self, detail: String) -> ConsulError {
        ConsulError::Decode {
            context: self.context.clone(),
            detail,
        }
    }
}

/// One entry of a [`KvList`], borrowing its strings from the list's body where it can;
/// its value stays base64 until [`KvEntry::decode`].
#[derive(Debug, Deserialize)]
pub struct KvEntry<'a> {
    /// Incremented each time an unlocked key is acquired: a fencing token.
    #[serde(rename = "LockIndex", default)]
    pub lock_index: u64,
    /// The key.
    #[serde(rename = "Key", borrow)]
    pub key: Cow<'a, str>,
    /// Opaque flags (full 64-bit range).
    #[serde(rename = "Flags", default)]
    pub flags: u64,
    /// The value as Consul sent it: base64, `None` for an empty value.
    #[serde(rename = "Value", default, borrow, deserialize_with = "borrowed_text")]
    value: Option<Cow<'a, str>>,
    /// The session holding the lock, `None` (or empty) when the key is not locked.
    #[serde(
        rename = "Session",
        default,
        borrow,
        deserialize_with = "borrowed_text"
    )]
    session: Option<Cow<'a, str>>,
    /// Raft index of the creation.
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
}

impl KvEntry<'_> {
    /// The session holding the lock, if any.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref().filter(|s| !s.is_empty())
    }

    /// The entry with its value decoded; a [`ConsulError::Decode`] (naming the read of
    /// `list`) when the value is not base64.
    pub fn decode(&self, list: &KvList) -> Result<KvPair> {
        let value = match &self.value {
            Some(text) => STANDARD.decode(text.as_bytes()).map_err(|error| {
                list.decode_error(format!("the value of {}: {error}", self.key))
            })?,
            None => Vec::new(),
        };
        let session = self.session().map(str::to_owned);
        Ok(KvPair {
            lock_index: self.lock_index,
            key: self.key.clone().into_owned(),
            flags: self.flags,
            value,
            session,
            create_index: self.create_index,
            modify_index: self.modify_index,
        })
    }
}

/// A string or `null`, borrowed from the input when it has no escapes.
fn borrowed_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(text)))
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text.to_owned())))
        }
        fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text)))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_str(Text)
        }
    }
    deserializer.deserialize_option(Text)
}

/// Checks a key (or, with `prefix`, a recursive prefix) and returns its encoded path.
///
/// Follows the reference's advice on key names that behave the same on every Consul version:
/// no leading `/`, no empty segment (`//`), no `.` or `..` segment, no leading or trailing
/// whitespace, no control characters. A trailing `/` is allowed; an empty key only as a prefix.
fn key_path(key: &str, prefix: bool, context: &ErrorContext) -> Result<String> {
    let problem = if key.is_empty() && !prefix {
        Some("the key is empty")
    } else if key.starts_with('/') {
        Some("the key starts with '/'")
    } else if key.trim() != key {
        Some("the key starts or ends with whitespace")
    } else if key.chars().any(char::is_control) {
        Some("the key contains control characters")
    } else {
        let segments: Vec<&str> = key.split('/').collect();
        let inner = &segments[..segments.len().saturating_sub(1)];
        if segments.iter().any(|s| *s == "." || *s == "..") {
            Some("the key contains a '.' or '..' segment")
        } else if inner.iter().any(|s| s.is_empty()) && !key.is_empty() {
            Some("the key contains an empty segment ('//')")
        } else {
            None
        }
    };
    match problem {
        Some(detail) => Err(ConsulError::InvalidRequest {
            context: context.clone(),
            detail: detail.to_owned(),
        }),
        None => Ok(api_path("/v1/kv/", key)),
    }
}

impl ConsulClient {
    /// `GET /v1/kv/<key>`: the entry, or `None` when the key does not exist. With blocking
    /// options, returns when the key changes (or is created or deleted) or the wait expires.
    pub async fn kv_get(
        &self,
        key: &str,
        options: QueryOptions,
    ) -> Result<QueryResult<Option<KvPair>>> {
        let answer = self.kv_get_raw(key, options).await?;
        Ok(QueryResult {
            value: answer.value.decode_all()?.into_iter().next(),
            meta: answer.meta,
        })
    }

    /// [`ConsulClient::kv_get`] with the answer left undecoded (a list of at most one entry).
    pub async fn kv_get_raw(
        &self,
        key: &str,
        options: QueryOptions,
    ) -> Result<QueryResult<KvList>> {
        let context = ErrorContext::new("kv get", key);
        let path = key_path(key, false, &context)?;
        let reply = self
            .read(
                Call::new(Method::GET, path, context.clone()).accept_not_found(),
                options,
            )
            .await?;
        Ok(raw_entries(reply, context))
    }

    /// `GET /v1/kv/<prefix>?recurse`: every entry whose key starts with `prefix` (a plain
    /// string prefix), sorted by key; empty when none. One blocking query of this kind watches
    /// a whole prefix.
    pub async fn kv_list(
        &self,
        prefix: &str,
        options: QueryOptions,
    ) -> Result<QueryResult<Vec<KvPair>>> {
        let answer = self.kv_list_raw(prefix, options).await?;
        Ok(QueryResult {
            value: answer.value.decode_all()?,
            meta: answer.meta,
        })
    }

    /// [`ConsulClient::kv_list`] with the answer left undecoded: a watcher that keeps the
    /// previous answer decodes only the entries whose `ModifyIndex` changed.
    pub async fn kv_list_raw(
        &self,
        prefix: &str,
        options: QueryOptions,
    ) -> Result<QueryResult<KvList>> {
        let context = ErrorContext::new("kv list", prefix);
        let path = key_path(prefix, true, &context)?;
        let call = Call::new(Method::GET, path, context.clone())
            .query([("recurse", String::new())])
            .accept_not_found();
        let reply = self.read(call, options).await?;
        Ok(raw_entries(reply, context))
    }

    /// `PUT /v1/kv/<key>?acquire=<session>`: takes the lock for `session`, writing `value` and
    /// `flags`. `false` when another session holds it or a lock-delay is active.
    pub async fn kv_acquire(
        &self,
        key: &str,
        session: &str,
        value: &[u8],
        flags: u64,
    ) -> Result<bool> {
        let context = ErrorContext::new("kv acquire", key);
        // Repeating an acquire by the same session with the same value is harmless.
        self.kv_write(
            key,
            context,
            value,
            flags,
            ("acquire", session.to_owned()),
            true,
        )
        .await
    }

    /// `PUT /v1/kv/<key>?release=<session>`: releases the lock held by `session`, writing
    /// `value` and `flags` (release replaces them). `false` when `session` did not hold it.
    pub async fn kv_release(
        &self,
        key: &str,
        session: &str,
        value: &[u8],
        flags: u64,
    ) -> Result<bool> {
        let context = ErrorContext::new("kv release", key);
        self.kv_write(
            key,
            context,
            value,
            flags,
            ("release", session.to_owned()),
            false,
        )
        .await
    }

    /// `PUT /v1/kv/<key>?cas=<index>`: writes only if the key's `ModifyIndex` is `index`
    /// (0: only if the key does not exist).
    pub async fn kv_cas(&self, key: &str, value: &[u8], flags: u64, index: u64) -> Result<bool> {
        let context = ErrorContext::new("kv cas", key);
        self.kv_write(
            key,
            context,
            value,
            flags,
            ("cas", index.to_string()),
            false,
        )
        .await
    }

    /// `PUT /v1/kv/<key>`: writes unconditionally (keeps a lock holder but resets `LockIndex`
    /// to 0, as Consul does).
    pub async fn kv_put(&self, key: &str, value: &[u8], flags: u64) -> Result<()> {
        let context = ErrorContext::new("kv put", key);
        let path = key_path(key, false, &context)?;
        let call = Call::new(Method::PUT, path, context)
            .query(flags_pair(flags))
            .body(value.to_vec(), "application/octet-stream");
        self.call(call).await?;
        Ok(())
    }

    /// `DELETE /v1/kv/<key>`, optionally `?cas=<index>`: `false` only when the CAS index did
    /// not match an existing key.
    pub async fn kv_delete(&self, key: &str, cas: Option<u64>) -> Result<bool> {
        let context = ErrorContext::new("kv delete", key);
        let path = key_path(key, false, &context)?;
        let mut call = Call::new(Method::DELETE, path, context.clone());
        if let Some(index) = cas {
            call = call.query([("cas", index.to_string())]).not_idempotent();
        }
        self.call(call).await?.boolean(&context)
    }

    async fn kv_write(
        &self,
        key: &str,
        context: ErrorContext,
        value: &[u8],
        flags: u64,
        condition: (&'static str, String),
        idempotent: bool,
    ) -> Result<bool> {
        let path = key_path(key, false, &context)?;
        let mut call = Call::new(Method::PUT, path, context.clone())
            .query([condition])
            .query(flags_pair(flags))
            .body(value.to_vec(), "application/octet-stream");
        if !idempotent {
            call = call.not_idempotent();
        }
        self.call(call).await?.boolean(&context)
    }
}

/// `flags=<n>` unless 0 (Consul stores 0 when the parameter is absent).
fn flags_pair(flags: u64) -> Option<(&'static str, String)> {
    (flags != 0).then(|| ("flags", flags.to_string()))
}

/// The undecoded entries of a KV read: none for a 404.
fn raw_entries(reply: Reply, context: ErrorContext) -> QueryResult<KvList> {
    let body = (reply.status != StatusCode::NOT_FOUND).then_some(reply.body);
    QueryResult {
        value: KvList { body, context },
        meta: reply.meta,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_entries() {
        let json = r#"[{"LockIndex":1,"Key":"k","Flags":3304740253564472344,"Value":"djE=",
            "Session":"s1","CreateIndex":5,"ModifyIndex":6},
            {"LockIndex":0,"Key":"e","Flags":0,"Value":null,"CreateIndex":7,"ModifyIndex":7}]"#;
        let entries: Vec<KvPair> = serde_json::from_str(json).unwrap();
        assert_eq!(entries[0].value, b"v1");
        assert_eq!(entries[0].flags, 3_304_740_253_564_472_344);
        assert_eq!(entries[0].session.as_deref(), Some("s1"));
        assert!(entries[1].value.is_empty());
        assert_eq!(entries[1].session, None);
        assert!(serde_json::from_str::<KvPair>(r#"{"Key":"k","Value":"!!"}"#).is_err());
    }

    #[test]
    fn undecoded_lists_decode_like_pairs() {
        let context = ErrorContext::new("kv list", "k");
        let json = r#"[{"LockIndex":1,"Key":"k","Flags":7,"Value":"djE=",
            "Session":"s1","CreateIndex":5,"ModifyIndex":6},
            {"Key":"e","Value":null,"Session":"","CreateIndex":7,"ModifyIndex":7}]"#;
        let list = KvList::from_json(json, context.clone());
        let expected: Vec<KvPair> = serde_json::from_str(json).unwrap();
        assert_eq!(list.decode_all().unwrap(), expected);
        let entries = list.entries().unwrap();
        assert_eq!(
            (entries[0].session(), entries[1].session()),
            (Some("s1"), None)
        );
        assert!(
            KvList::from_json("null", context.clone())
                .entries()
                .unwrap()
                .is_empty()
        );
        let not_found = KvList {
            body: None,
            context: context.clone(),
        };
        assert!(not_found.decode_all().unwrap().is_empty());
        let bad = KvList::from_json(r#"[{"Key":"k","Value":"!!"}]"#, context.clone());
        assert!(
            bad.entries().is_ok(),
            "the value is only checked when decoded"
        );
        assert!(matches!(bad.decode_all(), Err(ConsulError::Decode { .. })));
        assert!(KvList::from_json("{}", context).entries().is_err());
    }

    #[test]
    fn serializes_with_consul_field_names() {
        let pair = KvPair {
            lock_index: 2,
            key: "k".into(),
            flags: 1,
            value: b"v1".to_vec(),
            session: None,
            create_index: 3,
            modify_index: 4,
        };
        assert_eq!(
            serde_json::to_string(&pair).unwrap(),
            r#"{"LockIndex":2,"Key":"k","Flags":1,"Value":"djE=","CreateIndex":3,"ModifyIndex":4}"#
        );
    }

    #[test]
    fn validates_keys() {
        let context = ErrorContext::new("kv get", "");
        assert_eq!(
            key_path("elector/shop/web/leader", false, &context).unwrap(),
            "/v1/kv/elector/shop/web/leader"
        );
        assert_eq!(
            key_path("elector/", true, &context).unwrap(),
            "/v1/kv/elector/"
        );
        assert_eq!(key_path("", true, &context).unwrap(), "/v1/kv/");
        assert_eq!(key_path("a/b/", false, &context).unwrap(), "/v1/kv/a/b/");
        for bad in [
            "", "/a", "a//b", "a/../b", "./a", " a", "a ", "a\nb", "a/..",
        ] {
            let error = key_path(bad, false, &context).unwrap_err();
            assert_eq!(error.category(), "invalid_request", "{bad:?}");
        }
    }
}
