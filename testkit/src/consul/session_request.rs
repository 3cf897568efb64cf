//! Decoding of the `PUT /v1/session/create` body with Go's `encoding/json` rules:
//! field names match case-insensitively, unknown fields are ignored, `null` leaves a
//! string untouched and empties a list, and `LockDelay` is a duration string or a number
//! of nanoseconds where anything below 1000 ns means seconds.

use serde_json::Value;

use super::duration::parse_go_duration;
use super::error::ApiError;
use super::state::{ServiceCheck, SessionSpec};

/// Consul's `lockDelayMinThreshold`.
const LOCK_DELAY_MIN_THRESHOLD: i64 = 1000;

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(v: &Value, field: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field .{field} of type {go_type}",
        kind(v)
    )
}

fn decode_string(v: &Value, field: &str, target: &mut String) -> Result<(), String> {
    match v {
        Value::Null => Ok(()),
        Value::String(s) => {
            *target = s.clone();
            Ok(())
        }
        other => Err(type_error(other, field, "string")),
    }
}

fn decode_strings(v: &Value, field: &str, go_type: &str) -> Result<Option<Vec<String>>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::Null => Ok(String::new()),
                Value::String(s) => Ok(s.clone()),
                other => Err(type_error(other, field, "string")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(type_error(other, field, go_type)),
    }
}

fn decode_service_checks(v: &Value) -> Result<Option<Vec<ServiceCheck>>, String> {
    let items = match v {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        other => return Err(type_error(other, "ServiceChecks", "[]structs.ServiceCheck")),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut check = ServiceCheck {
            id: String::new(),
            namespace: String::new(),
        };
        match item {
            Value::Null => {}
            Value::Object(fields) => {
                for (name, value) in fields {
                    match name.to_ascii_lowercase().as_str() {
                        "id" => decode_string(value, "ServiceChecks.ID", &mut check.id)?,
                        "namespace" => {
                            decode_string(value, "ServiceChecks.Namespace", &mut check.namespace)?
                        }
                        _ => {}
                    }
                }
            }
            other => return Err(type_error(other, "ServiceChecks", "structs.ServiceCheck")),
        }
        out.push(check);
    }
    Ok(Some(out))
}

/// Go's `int64(f)` on amd64: truncation, and `math.MinInt64` for NaN or out of range.
fn go_float_to_int64(f: f64) -> i64 {
    // 2^63 as f64; every f64 in [-2^63, 2^63) converts exactly after truncation.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() || !(-LIMIT..LIMIT).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// `Session.UnmarshalJSON`'s LockDelay rule. `None` keeps the default (JSON null).
fn decode_lock_delay(v: &Value) -> Result<Option<i64>, String> {
    let ns = match v {
        Value::Null => return Ok(None),
        Value::String(s) => parse_go_duration(s).map_err(|e| e.to_string())?,
        Value::Number(n) => n.as_f64().map_or(0, go_float_to_int64),
        // Any other JSON type leaves the duration at zero.
        _ => 0,
    };
    if ns < LOCK_DELAY_MIN_THRESHOLD {
        Ok(Some(ns.wrapping_mul(1_000_000_000)))
    } else {
        Ok(Some(ns))
    }
}

fn decode_into(spec: &mut SessionSpec, body: &[u8]) -> Result<(), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        if e.is_eof() {
            "unexpected end of JSON input".to_string()
        } else {
            format!("invalid JSON: {e}")
        }
    })?;
    let fields = match value {
        Value::Null => return Ok(()),
        Value::Object(fields) => fields,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type structs.Session",
                kind(&other)
            ));
        }
    };
    let mut first_error = None;
    let mut lock_delay = None;
    for (name, value) in &fields {
        let result = match name.to_ascii_lowercase().as_str() {
            "name" => decode_string(value, "Name", &mut spec.name),
            "node" => decode_string(value, "Node", &mut spec.node),
            "behavior" => decode_string(value, "Behavior", &mut spec.behavior),
            "ttl" => decode_string(value, "TTL", &mut spec.ttl),
            "nodechecks" => {
                decode_strings(value, "NodeChecks", "[]string").map(|v| spec.node_checks = v)
            }
            "checks" => decode_strings(value, "Checks", "[]types.CheckID").map(|v| spec.checks = v),
            "servicechecks" => decode_service_checks(value).map(|v| spec.service_checks = v),
            "lockdelay" => {
                lock_delay = Some(value);
                Ok(())
            }
            // ID, CreateIndex, ModifyIndex and unknown fields are ignored.
            _ => Ok(()),
        };
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if let Some(v) = lock_delay
        && let Some(ns) = decode_lock_delay(v)?
    {
        spec.lock_delay_ns = ns;
    }
    Ok(())
}

/// Builds the create request: defaults, then the body (only when non-empty), then the
/// check fixup rules. A decode error is 400 `Request decode failed: <error>`.
pub(crate) fn decode_session_create(
    body: &[u8],
    agent_node: &str,
) -> Result<SessionSpec, ApiError> {
    let mut spec = SessionSpec::defaults(agent_node);
    if !body.is_empty() {
        decode_into(&mut spec, body)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    }
    spec.fixup_checks();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Result<SessionSpec, ApiError> {
        decode_session_create(body.as_bytes(), "node1")
    }

    #[test]
    fn defaults_for_empty_and_null_bodies() {
        for body in ["", "null", "{}"] {
            let s = decode(body).expect(body);
            assert_eq!(s.node, "node1");
            assert_eq!(s.lock_delay_ns, 15_000_000_000);
            assert_eq!(s.behavior, "release");
            assert_eq!(s.ttl, "");
            assert_eq!(s.node_checks, Some(vec!["serfHealth".to_string()]));
            assert_eq!(s.checks, None);
        }
    }

    #[test]
    fn lock_delay_rules() {
        let ld = |body: &str| decode(body).map(|s| s.lock_delay_ns);
        assert_eq!(ld(r#"{"LockDelay":5}"#), Ok(5_000_000_000));
        assert_eq!(ld(r#"{"LockDelay":"500ns"}"#), Ok(500_000_000_000));
        assert_eq!(ld(r#"{"LockDelay":1000}"#), Ok(1000));
        assert_eq!(ld(r#"{"LockDelay":"0s"}"#), Ok(0));
        assert_eq!(ld(r#"{"LockDelay":0}"#), Ok(0));
        assert_eq!(ld(r#"{"LockDelay":"120s"}"#), Ok(120_000_000_000));
        assert_eq!(ld(r#"{"lockdelay":"1500ms"}"#), Ok(1_500_000_000));
        assert_eq!(ld(r#"{"LockDelay":null}"#), Ok(15_000_000_000));
        assert_eq!(ld(r#"{"LockDelay":true}"#), Ok(0));
        assert_eq!(ld(r#"{"LockDelay":2.9}"#), Ok(2_000_000_000));
        // Out of range: Go yields MinInt64, which the seconds rule wraps to 0.
        assert_eq!(ld(r#"{"LockDelay":1e300}"#), Ok(0));
        let err = ld(r#"{"LockDelay":"15"}"#).unwrap_err();
        assert_eq!(err.status, 400);
        assert_eq!(
            err.body,
            "Request decode failed: time: missing unit in duration \"15\""
        );
    }

    #[test]
    fn case_insensitive_fields_and_unknowns_ignored() {
        let s = decode(
            r#"{"name":"n","NODE":"x","ttl":"15s","behavior":"delete","Whatever":1,"ID":"zz","CreateIndex":9}"#,
        )
        .expect("decode");
        assert_eq!(
            (
                s.name.as_str(),
                s.node.as_str(),
                s.ttl.as_str(),
                s.behavior.as_str()
            ),
            ("n", "x", "15s", "delete")
        );
        // Explicit empty Node is kept (and refused later with `Must provide Node`).
        assert_eq!(decode(r#"{"Node":""}"#).map(|s| s.node), Ok(String::new()));
    }

    #[test]
    fn decode_errors_are_400() {
        for body in [
            "{",
            "[1]",
            "\"x\"",
            r#"{"TTL":10}"#,
            r#"{"NodeChecks":"a"}"#,
            " ",
        ] {
            let err = decode(body).unwrap_err();
            assert_eq!(err.status, 400, "{body}");
            assert!(err.body.starts_with("Request decode failed: "), "{body}");
        }
    }

    #[test]
    fn checks_fixup_through_bodies() {
        let s = decode(r#"{"NodeChecks":[]}"#).expect("decode");
        assert_eq!((s.node_checks, s.checks), (Some(vec![]), None));
        let s = decode(r#"{"Checks":[]}"#).expect("decode");
        assert_eq!(s.node_checks, Some(vec![]));
        let s = decode(r#"{"Checks":["a"]}"#).expect("decode");
        assert_eq!(
            (s.node_checks, s.checks),
            (
                Some(vec!["serfHealth".to_string()]),
                Some(vec!["a".to_string()])
            )
        );
        let s = decode(r#"{"ServiceChecks":[{"id":"web","Namespace":"ns"}]}"#).expect("decode");
        assert_eq!(
            s.service_checks,
            Some(vec![ServiceCheck {
                id: "web".into(),
                namespace: "ns".into()
            }])
        );
    }
}
