//! What an election may do with the operator's own Consul credentials, and which Secret may
//! lend it a token of its own (the security model of `spec.consul`, docs/design.md section 6):
//! - with the operator's own token, an election may use only keys under
//!   `elector/<its namespace>/`, only the operator's own datacenter or one the admin
//!   allowed (`--consul-allowed-datacenters`), and only the operator's own Consul Enterprise
//!   namespace and admin partition;
//! - a token Secret is used only if its annotation
//!   [`SECRET_ALLOWED_ELECTIONS_ANNOTATION`] names the election (or is `*`).
//!
//! Pure: the controller reads the Secret and builds the client; these functions decide.

use std::collections::BTreeMap;

use crate::crd::{SECRET_ALLOWED_ELECTIONS_ANNOTATION, SpecProblem};

/// The field a refused key is reported under.
pub const KEY_FIELD: &str = "spec.key";
/// The field a refused datacenter is reported under.
pub const DATACENTER_FIELD: &str = "spec.consul.datacenter";
/// The field a refused Consul Enterprise namespace is reported under.
pub const NAMESPACE_FIELD: &str = "spec.consul.namespace";
/// The field a refused Consul Enterprise admin partition is reported under.
pub const PARTITION_FIELD: &str = "spec.consul.partition";

/// What the operator's own token is scoped to.
#[derive(Debug, Clone, Copy)]
pub struct OwnToken<'a> {
    /// The operator's own datacenter (`None`: its agent's, which has no name here).
    pub datacenter: Option<&'a str>,
    /// The datacenters the admin allowed beside it.
    pub allowed_datacenters: &'a [String],
    /// The operator's own Consul Enterprise namespace (`None`: its token's).
    pub namespace: Option<&'a str>,
    /// The operator's own Consul Enterprise admin partition (`None`: its token's).
    pub partition: Option<&'a str>,
}

/// Checks that an election in `namespace` may use `key` in `datacenter` (`None`: the
/// operator's default) with the operator's own token.
pub fn own_token_allows(
    own: OwnToken<'_>,
    namespace: &str,
    key: &str,
    datacenter: Option<&str>,
) -> Result<(), SpecProblem> {
    let prefix = namespace_prefix(namespace);
    if !key.starts_with(&prefix) {
        return Err(SpecProblem {
            field: KEY_FIELD,
            message: format!(
                "with the operator's own Consul token an election may only use keys under \
                 {prefix}; name a token of your own in spec.consul.tokenSecretRef to use {key:?}"
            ),
        });
    }
    match datacenter {
        Some(datacenter)
            if !datacenter_allowed(datacenter, own.datacenter, own.allowed_datacenters) =>
        {
            Err(SpecProblem {
                field: DATACENTER_FIELD,
                message: format!(
                    "{datacenter:?} is not a Consul datacenter this operator's own token may \
                     be used in: only its own ({}) and the datacenters its admin allowed \
                     (--consul-allowed-datacenters, Helm value consul.allowedDatacenters); name \
                     a token of your own in spec.consul.tokenSecretRef to use another",
                    own.datacenter
                        .map_or_else(|| "its agent's".to_owned(), |dc| format!("{dc:?}"))
                ),
            })
        }
        _ => Ok(()),
    }
}

/// Checks that an election may name the Consul Enterprise `namespace` and `partition` (`None`:
/// the operator's) with the operator's own token: only the operator's own, since that token may
/// reach other teams' namespaces and partitions.
pub fn own_tenancy_allows(
    own: OwnToken<'_>,
    namespace: Option<&str>,
    partition: Option<&str>,
) -> Result<(), SpecProblem> {
    let asked = [
        (NAMESPACE_FIELD, "namespace", namespace, own.namespace),
        (PARTITION_FIELD, "admin partition", partition, own.partition),
    ];
    for (field, what, asked, own) in asked {
        if let Some(asked) = asked
            && own != Some(asked)
        {
            return Err(SpecProblem {
                field,
                message: format!(
                    "with the operator's own Consul token an election may only use the \
                     operator's own Consul {what} ({}); name a token of your own in \
                     spec.consul.tokenSecretRef to use {asked:?}",
                    own.map_or_else(|| "its token's".to_owned(), |own| format!("{own:?}"))
                ),
            });
        }
    }
    Ok(())
}

/// Whether an election may name `datacenter` with the operator's own token: the operator's own
/// datacenter (`own`; `None` is its agent's, which has no name here) or one of `allowed`.
/// Names are compared exactly: a spelling the admin did not list is refused.
fn datacenter_allowed(datacenter: &str, own: Option<&str>, allowed: &[String]) -> bool {
    own == Some(datacenter) || allowed.iter().any(|listed| listed == datacenter)
}

/// The key prefix a namespace owns in the operator's Consul.
fn namespace_prefix(namespace: &str) -> String {
    format!("elector/{namespace}/")
}

/// Whether a Secret with these `annotations` opted in for `election`.
pub fn opted_in(annotations: &BTreeMap<String, String>, election: &str) -> bool {
    annotations
        .get(SECRET_ALLOWED_ELECTIONS_ANNOTATION)
        .is_some_and(|allowed| secret_allows(allowed, election))
}

/// Whether the annotation value `allowed` (comma-separated names, or `*`) names `election`.
fn secret_allows(allowed: &str, election: &str) -> bool {
    allowed
        .split(',')
        .map(str::trim)
        .any(|name| name == "*" || name == election)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::default_key;

    const OWN: OwnToken<'static> = OwnToken {
        datacenter: Some("dc1"),
        allowed_datacenters: &[],
        namespace: Some("team-a"),
        partition: None,
    };

    #[test]
    fn a_namespace_owns_its_default_keys_and_no_other_namespaces() {
        assert!(own_token_allows(OWN, "shop", &default_key("shop", "web"), None).is_ok());
        for other in ["shop-2", "sho"] {
            let refused = own_token_allows(OWN, "shop", &default_key(other, "web"), None);
            assert_eq!(refused.map_err(|p| p.field), Err(KEY_FIELD), "{other}");
        }
    }

    #[test]
    fn the_operators_token_goes_to_its_own_and_the_allowed_datacenters_only() {
        let allowed = ["dc2".to_owned(), "eu-west".to_owned()];
        assert!(datacenter_allowed("dc1", Some("dc1"), &[]));
        assert!(datacenter_allowed("dc2", Some("dc1"), &allowed));
        assert!(datacenter_allowed("eu-west", None, &allowed));
        assert!(!datacenter_allowed("dc3", Some("dc1"), &allowed));
        assert!(
            !datacenter_allowed("dc1", None, &[]),
            "the agent's has no name"
        );
        assert!(
            !datacenter_allowed("DC2", Some("dc1"), &allowed),
            "exact names"
        );
        assert!(
            !datacenter_allowed("dc", Some("dc1"), &allowed),
            "no prefixes"
        );
        let key = default_key("shop", "web");
        let refused = own_token_allows(OWN, "shop", &key, Some("dc3"));
        assert_eq!(refused.map_err(|p| p.field), Err(DATACENTER_FIELD));
        assert!(own_token_allows(OWN, "shop", &key, Some("dc1")).is_ok());
    }

    #[test]
    fn the_operators_token_goes_to_its_own_namespace_and_partition_only() {
        assert!(own_tenancy_allows(OWN, None, None).is_ok());
        assert!(own_tenancy_allows(OWN, Some("team-a"), None).is_ok());
        let refused = |namespace, partition| {
            own_tenancy_allows(OWN, namespace, partition).map_err(|p| (p.field, p.message))
        };
        let (field, message) = refused(Some("team-b"), None).err().unwrap_or_default();
        assert_eq!(field, NAMESPACE_FIELD);
        assert!(message.contains("(\"team-a\")"), "{message}");
        assert_eq!(
            refused(None, Some("default")).map_err(|(f, _)| f),
            Err(PARTITION_FIELD)
        );
    }

    #[test]
    fn the_annotation_names_elections_or_all() {
        assert!(secret_allows("web", "web"));
        assert!(secret_allows("api, web ,jobs", "web"));
        assert!(secret_allows("*", "web"));
        assert!(!secret_allows("", "web"));
        assert!(!secret_allows("web2,we", "web"));
        assert!(!secret_allows("web*", "web"));
        let annotations = BTreeMap::from([(
            SECRET_ALLOWED_ELECTIONS_ANNOTATION.to_owned(),
            "web".to_owned(),
        )]);
        assert!(opted_in(&annotations, "web"));
        assert!(!opted_in(&annotations, "api"));
        assert!(!opted_in(&BTreeMap::new(), "web"));
    }
}
