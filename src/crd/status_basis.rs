//! What a status write is based on (the revision and fencing token of the status it was
//! decided from), and the conditional patch that carries it out: the API server refuses the
//! write when the status is no longer that one (docs/design.md rules 6 and 8).

use serde_json::json;

use super::LeaderElectionStatus;

/// What a status write is based on: the revision and fencing token of the status read when
/// the write was decided. The write is sent only if the status still has both, so a plan
/// made from an older status never replaces a newer one, even when the newer one arrived
/// while the plan was carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Basis {
    /// The status's `revision`.
    pub revision: Option<u64>,
    /// Its `fencingToken`.
    pub fencing_token: Option<u64>,
}

impl Basis {
    /// The basis of a write decided from `status`.
    pub fn of(status: &LeaderElectionStatus) -> Self {
        Basis {
            revision: status.revision,
            fencing_token: status.fencing_token,
        }
    }

    /// The status write: a JSON patch that replaces the whole status with `new` only if its
    /// revision and fencing token are still those of this basis (a late write, based on an
    /// older status, is refused by the API server instead of replacing a newer leader, record
    /// or switchover outcome, or moving the token backwards). A field the basis lacks is
    /// tested absent; when no status existed (`status_exists`) and none was based on, the
    /// patch tests that there is none.
    pub fn patch(
        self,
        status_exists: bool,
        new: &LeaderElectionStatus,
    ) -> Result<json_patch::Patch, serde_json::Error> {
        let mut ops = if status_exists || self != Basis::default() {
            vec![
                json!({"op": "test", "path": "/status/fencingToken", "value": self.fencing_token}),
                json!({"op": "test", "path": "/status/revision", "value": self.revision}),
            ]
        } else {
            vec![json!({"op": "test", "path": "/status", "value": null})]
        };
        ops.push(json!({"op": "add", "path": "/status", "value": new}));
        serde_json::from_value(serde_json::Value::Array(ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(patch: json_patch::Patch) -> serde_json::Value {
        serde_json::to_value(patch).unwrap_or_default()
    }

    #[test]
    fn a_write_tests_the_revision_and_token_it_was_based_on() {
        let new = LeaderElectionStatus::default();
        let based = Basis {
            revision: Some(4),
            fencing_token: None,
        };
        assert_eq!(
            based.patch(true, &new).map(ops).ok(),
            Some(json!([
                {"op": "test", "path": "/status/fencingToken", "value": null},
                {"op": "test", "path": "/status/revision", "value": 4},
                {"op": "add", "path": "/status", "value": new},
            ]))
        );
        // The first write of an election tests that nobody wrote a status meanwhile.
        assert_eq!(
            Basis::default().patch(false, &new).map(ops).ok(),
            Some(json!([
                {"op": "test", "path": "/status", "value": null},
                {"op": "add", "path": "/status", "value": new},
            ]))
        );
    }
}
