//! The switchover request on a LeaderElection: the `elector.dev/switchover-to` annotation,
//! read for the planner and removed once the planner decided it. A request is decided once
//! (`election::switchover_request`): this process remembers the request it decided and the
//! resourceVersion that no longer has it (`cache::written::Memory`).

use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, RemoveOperation, TestOperation};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::Error;
use crate::context::Context;
use crate::crd::{LeaderElection, SWITCHOVER_ANNOTATION};
use crate::election::config::ElectionKey;
use crate::election::observe::SwitchoverRecord;
use crate::election::switchover_request::{self, RequestStep};

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
    let path = PointerBuf::from_tokens(["metadata", "annotations", SWITCHOVER_ANNOTATION]);
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: decided.into(),
        }),
        PatchOperation::Remove(RemoveOperation { path }),
    ]);
    let removed = match api
        .patch(
            &key.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(le) => Some(le),
        Err(kube::Error::Api(status)) if status.is_not_found() => None,
        // The test failed (already removed, or a newer request): the current version is the
        // first one whose request is not the decided one.
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 409 => {
            api.get_opt(&key.name).await.map_err(Error::kube(
                "read the election after removing its switchover request",
            ))?
        }
        Err(error) => return Err(Error::kube("clear switchover request")(error)),
    };
    ctx.caches.written.request_removed(key, removed.as_ref());
    Ok(())
}
