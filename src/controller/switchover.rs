//! The switchover request on a LeaderElection: the `elector.dev/switchover-to` annotation,
//! read for the planner and removed once the planner decided it. A request is decided once
//! (`election::switchover_request`): this process remembers the request it decided and the
//! resourceVersion that no longer has it (`cache::written::Memory`).

use kube::ResourceExt;
use kube::api::Api;

use crate::Error;
use crate::context::Context;
use crate::crd::{LeaderElection, SWITCHOVER_ANNOTATION};
use crate::election::config::ElectionKey;
use crate::election::observe::SwitchoverRecord;
use crate::election::switchover_request::{self, RequestStep};
use crate::k8s;

/// The request on `le` still to decide, if any (`last`: the status's record of the last
/// switchover); a decided request whose removal may not have happened is removed again, and
/// an error says that removal failed (the request stays decided).
pub async fn pending(
    ctx: &Context,
    key: &ElectionKey,
    le: &LeaderElection,
    last: Option<&SwitchoverRecord>,
) -> Result<Option<String>, Error> {
    let Some(request) = le.annotations().get(SWITCHOVER_ANNOTATION) else {
        return Ok(None);
    };
    let seen = ctx.caches.written.request_seen(key, le, request);
    match switchover_request::step(seen, last, request) {
        RequestStep::Decide => Ok(Some(request.to_owned())),
        RequestStep::Skip => Ok(None),
        RequestStep::Remove => clear_request(ctx, key, request).await.map(|()| None),
    }
}

/// Removes the election's request if it still reads `decided`. The patch tests the value
/// before removing it, so a request written since (another pod, or the same pod again after
/// the user saw the outcome) is never lost: the API server refuses the patch, and the next
/// reconcile sees the new request. The version without the request is remembered for the
/// request [`Memory::request_deciding`](crate::cache::written::Memory::request_deciding)
/// recorded (see the module documentation).
pub async fn clear_request(ctx: &Context, key: &ElectionKey, decided: &str) -> Result<(), Error> {
    let api: Api<LeaderElection> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let now = k8s::remove_annotation_if(&api, &key.name, SWITCHOVER_ANNOTATION, decided)
        .await
        .map_err(Error::kube("clear switchover request"))?;
    ctx.caches.written.request_removed(key, now.as_ref());
    Ok(())
}
