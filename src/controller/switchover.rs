//! The switchover request on a LeaderElection: the `elector.dev/switchover-to` annotation,
//! read for the planner and removed once the planner decided it.

use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, RemoveOperation, TestOperation};
use kube::api::{Api, Patch, PatchParams};

use super::context::Context;
use crate::Error;
use crate::crd::{LeaderElection, SWITCHOVER_ANNOTATION};
use crate::election::config::ElectionKey;

/// The pending request of `le`, if any (a pod name, or `*`).
pub fn request(le: &LeaderElection) -> Option<&str> {
    le.metadata
        .annotations
        .as_ref()?
        .get(SWITCHOVER_ANNOTATION)
        .map(String::as_str)
}

/// Removes the election's request if it still reads `decided`. The patch tests the value
/// before removing it, so a request written since (another pod, or the same pod again after
/// the user saw the outcome) is never lost: the API server refuses the patch, and the next
/// reconcile sees the new request.
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
    match api
        .patch(
            &key.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone, or the test failed (a newer request, or already removed).
        Err(kube::Error::Api(status))
            if status.is_not_found() || status.code == 422 || status.code == 409 =>
        {
            Ok(())
        }
        Err(error) => Err(Error::kube("clear switchover request")(error)),
    }
}
