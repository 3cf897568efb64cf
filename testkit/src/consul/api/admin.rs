//! The `/_emu/` admin surface: thin HTTP wrappers over the emulator's test hooks, for the
//! standalone binary.
//!
//! | Request | Effect |
//! |---|---|
//! | `PUT /_emu/advance?by=5s` | `advance` (manual clock only) |
//! | `GET /_emu/now` | current emulator time |
//! | `PUT /_emu/leader?present=false` | `set_leader` |
//! | `PUT /_emu/leader-election` | `simulate_leader_election` |
//! | `PUT /_emu/session/invalidate/<id>` | `invalidate_session` (`true`/`false`) |
//! | `PUT /_emu/node/<node>` / `DELETE /_emu/node/<node>` | register / deregister a node |
//! | `PUT /_emu/check/<node>/<check>?status=critical` / `DELETE …` | set / deregister a check |
//! | `GET /_emu/stats` / `DELETE /_emu/stats` | `stats` as JSON / `reset_stats` |
//! | `GET /_emu/blocked` | number of parked blocking queries |
//! | `GET /_emu/index` | global Raft index |
//! | `PUT /_emu/faults` with a JSON [`FaultSpec`] body | `add_fault`, answers `{"ID": n}` |
//! | `DELETE /_emu/faults` / `DELETE /_emu/faults/<id>` | `clear_faults` / `remove_fault` |

use std::time::Duration;

use http::Method;
use serde::{Deserialize, Serialize};

use super::super::duration::{format_go_duration, nanos_to_duration, parse_go_duration};
use super::super::faults::{Endpoint, Fault, FaultAction, FaultId};
use super::super::query::parse_uint;
use super::super::state::CheckStatus;
use super::ctx::Ctx;
use super::response::{Resp, json_response, text};

/// JSON body of `PUT /_emu/faults`.
///
/// `endpoint`: `any`, `session.create`, `session.destroy`, `session.renew`,
/// `session.info`, `session.list`, `session.node`, `kv`, `kv:<prefix>` or `status.leader`.
/// `action`: `latency` (with `latency`, a Go duration), `respond` (with `status`, `body`,
/// optional `retry_after`), `drop` or `no-leader`.
#[derive(Debug, Deserialize)]
struct FaultSpec {
    endpoint: String,
    #[serde(default)]
    method: Option<String>,
    action: String,
    #[serde(default)]
    times: Option<u32>,
    #[serde(default)]
    latency: Option<String>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    retry_after: Option<u64>,
}

impl FaultSpec {
    fn into_fault(self) -> Result<Fault, String> {
        let endpoint = match self.endpoint.as_str() {
            "any" => Endpoint::Any,
            "session.create" => Endpoint::SessionCreate,
            "session.destroy" => Endpoint::SessionDestroy,
            "session.renew" => Endpoint::SessionRenew,
            "session.info" => Endpoint::SessionInfo,
            "session.list" => Endpoint::SessionList,
            "session.node" => Endpoint::SessionNode,
            "kv" => Endpoint::Kv,
            "status.leader" => Endpoint::StatusLeader,
            other => match other.strip_prefix("kv:") {
                Some(prefix) => Endpoint::KvPrefix(prefix.to_string()),
                None => return Err(format!("unknown endpoint {other:?}")),
            },
        };
        let method = self
            .method
            .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()))
            .transpose()
            .map_err(|e| format!("bad method: {e}"))?;
        let action = match self.action.as_str() {
            "latency" => {
                let ns = parse_go_duration(self.latency.as_deref().unwrap_or(""))
                    .map_err(|e| e.to_string())?;
                FaultAction::Latency(nanos_to_duration(ns))
            }
            "respond" => FaultAction::Respond {
                status: self.status.unwrap_or(500),
                body: self.body.unwrap_or_default(),
                retry_after: self.retry_after,
            },
            "drop" => FaultAction::DropConnection,
            "no-leader" => FaultAction::NoLeaderError,
            other => return Err(format!("unknown action {other:?}")),
        };
        Ok(Fault {
            endpoint,
            method,
            action,
            times: self.times,
        })
    }
}

#[derive(Serialize)]
struct NowJson {
    now: String,
    now_ns: u128,
}

fn now_json(now: Duration) -> NowJson {
    NowJson {
        now: format_go_duration(super::super::duration::duration_to_nanos(now)),
        now_ns: now.as_nanos(),
    }
}

fn check_status(s: Option<&str>) -> Result<CheckStatus, String> {
    match s.unwrap_or("passing") {
        "passing" => Ok(CheckStatus::Passing),
        "warning" => Ok(CheckStatus::Warning),
        "critical" => Ok(CheckStatus::Critical),
        other => Err(format!("unknown check status {other:?}")),
    }
}

/// Serves one admin request.
pub(super) async fn handle(mut ctx: Ctx, method: &Method, path: &str) -> Resp {
    match run(&mut ctx, method, path).await {
        Ok(resp) => resp,
        Err((status, msg)) => text(status, msg),
    }
}

async fn run(ctx: &mut Ctx, method: &Method, path: &str) -> Result<Resp, (u16, String)> {
    let inner = ctx.inner.clone();
    let pretty = ctx.pretty;
    let bad = |msg: String| (400, msg);
    let segments: Vec<&str> = path.split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("PUT", ["advance"]) => {
            if !inner.clock.is_manual() {
                return Err(bad("advance needs the manual clock".into()));
            }
            let by = parse_go_duration(ctx.query.get("by").unwrap_or(""))
                .map_err(|e| bad(e.to_string()))?;
            inner.advance(nanos_to_duration(by)).await;
            Ok(json_response(&now_json(inner.clock.now()), pretty))
        }
        ("GET", ["now"]) => Ok(json_response(&now_json(inner.clock.now()), pretty)),
        ("PUT", ["leader"]) => {
            let present = match ctx.query.get("present").unwrap_or("true") {
                "true" | "" => true,
                "false" => false,
                other => return Err(bad(format!("bad present value {other:?}"))),
            };
            inner.set_leader(present);
            Ok(json_response(&true, pretty))
        }
        ("PUT", ["leader-election"]) => {
            inner.simulate_leader_election();
            Ok(json_response(&true, pretty))
        }
        ("PUT", ["session", "invalidate", id]) => {
            Ok(json_response(&inner.invalidate_session(id), pretty))
        }
        ("PUT", ["node", node]) => {
            inner.register_node(node);
            Ok(json_response(&true, pretty))
        }
        ("DELETE", ["node", node]) => {
            inner.deregister_node(node);
            Ok(json_response(&true, pretty))
        }
        ("PUT", ["check", node, check]) => {
            let status = check_status(ctx.query.get("status")).map_err(bad)?;
            inner.set_check(node, check, status);
            Ok(json_response(&true, pretty))
        }
        ("DELETE", ["check", node, check]) => {
            inner.deregister_check(node, check);
            Ok(json_response(&true, pretty))
        }
        ("GET", ["stats"]) => Ok(json_response(&inner.stats.snapshot(), pretty)),
        ("DELETE", ["stats"]) => {
            inner.stats.reset();
            Ok(json_response(&true, pretty))
        }
        ("GET", ["blocked"]) => Ok(json_response(&inner.parked.len(), pretty)),
        ("GET", ["index"]) => Ok(json_response(&inner.index(), pretty)),
        ("PUT", ["faults"]) => {
            let body = ctx
                .read_body(1024 * 1024)
                .await
                .map_err(|_| bad("unreadable body".into()))?;
            let spec: FaultSpec =
                serde_json::from_slice(&body).map_err(|e| bad(format!("bad fault: {e}")))?;
            let fault = spec.into_fault().map_err(bad)?;
            #[derive(Serialize)]
            struct IdJson {
                #[serde(rename = "ID")]
                id: u64,
            }
            let FaultId(id) = inner.add_fault(fault);
            Ok(json_response(&IdJson { id }, pretty))
        }
        ("DELETE", ["faults"]) => {
            inner.clear_faults();
            Ok(json_response(&true, pretty))
        }
        ("DELETE", ["faults", id]) => {
            let id = parse_uint(id).map_err(bad)?;
            inner.remove_fault(FaultId(id));
            Ok(json_response(&true, pretty))
        }
        _ => Err((404, format!("unknown admin endpoint {method} /_emu/{path}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_specs() {
        let spec: FaultSpec = serde_json::from_str(
            r#"{"endpoint":"kv:svc/","method":"get","action":"respond","status":429,"body":"slow down","retry_after":2,"times":1}"#,
        )
        .expect("spec");
        let fault = spec.into_fault().expect("fault");
        assert_eq!(fault.endpoint, Endpoint::KvPrefix("svc/".into()));
        assert_eq!(fault.method, Some(Method::GET));
        assert_eq!(fault.times, Some(1));
        assert_eq!(
            fault.action,
            FaultAction::Respond {
                status: 429,
                body: "slow down".into(),
                retry_after: Some(2)
            }
        );
        let spec: FaultSpec =
            serde_json::from_str(r#"{"endpoint":"any","action":"latency","latency":"250ms"}"#)
                .expect("spec");
        assert_eq!(
            spec.into_fault().expect("fault").action,
            FaultAction::Latency(Duration::from_millis(250))
        );
        let spec: FaultSpec =
            serde_json::from_str(r#"{"endpoint":"nope","action":"drop"}"#).expect("spec");
        assert!(spec.into_fault().is_err());
        assert_eq!(check_status(Some("critical")), Ok(CheckStatus::Critical));
        assert!(check_status(Some("x")).is_err());
    }
}
