//! The election's pod selector as a Kubernetes label-selector string (for list and watch
//! requests) and as a matcher (for pods already in hand). Both follow Kubernetes' semantics.

use std::collections::BTreeMap;

use super::spec::{PodSelector, SelectorOperator};

/// The selector in Kubernetes' string form, such as `app=web,tier in (a,b),!canary`:
/// `matchLabels` first (by key), then `matchExpressions` in order.
///
/// The string is only meaningful for a selector that passed validation (valid keys and
/// values); an empty selector gives an empty string, which selects every pod.
pub fn selector_string(selector: &PodSelector) -> String {
    let labels = selector
        .match_labels
        .iter()
        .map(|(key, value)| format!("{key}={value}"));
    let expressions = selector.match_expressions.iter().map(|requirement| {
        let key = &requirement.key;
        let values = requirement.values.join(",");
        match requirement.operator {
            SelectorOperator::In => format!("{key} in ({values})"),
            SelectorOperator::NotIn => format!("{key} notin ({values})"),
            SelectorOperator::Exists => key.clone(),
            SelectorOperator::DoesNotExist => format!("!{key}"),
        }
    });
    labels.chain(expressions).collect::<Vec<_>>().join(",")
}

/// Whether a pod with `labels` is selected: every `matchLabels` entry is present with that
/// value and every requirement holds (`NotIn` also holds when the label is absent). An empty
/// selector matches every pod, as in Kubernetes; validation rejects it before it gets here.
pub fn selector_matches(selector: &PodSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector
        .match_labels
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    labels_match
        && selector.match_expressions.iter().all(|requirement| {
            let value = labels.get(&requirement.key);
            let in_values = value.is_some_and(|v| requirement.values.contains(v));
            match requirement.operator {
                SelectorOperator::In => in_values,
                SelectorOperator::NotIn => !in_values,
                SelectorOperator::Exists => value.is_some(),
                SelectorOperator::DoesNotExist => value.is_none(),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::spec::SelectorRequirement;

    fn requirement(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn selector(
        match_labels: &[(&str, &str)],
        match_expressions: Vec<SelectorRequirement>,
    ) -> PodSelector {
        PodSelector {
            match_labels: labels(match_labels),
            match_expressions,
        }
    }

    #[test]
    fn string_form_of_every_operator() {
        let s = selector(
            &[("tier", "db"), ("app", "web")],
            vec![
                requirement("zone", SelectorOperator::In, &["a", "b"]),
                requirement("track", SelectorOperator::NotIn, &["canary"]),
                requirement("example.com/ready", SelectorOperator::Exists, &[]),
                requirement("legacy", SelectorOperator::DoesNotExist, &[]),
            ],
        );
        assert_eq!(
            selector_string(&s),
            "app=web,tier=db,zone in (a,b),track notin (canary),example.com/ready,!legacy"
        );
        assert_eq!(selector_string(&PodSelector::default()), "");
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = selector(&[("app", "web"), ("tier", "db")], vec![]);
        assert!(selector_matches(
            &s,
            &labels(&[("app", "web"), ("tier", "db"), ("x", "y")])
        ));
        assert!(!selector_matches(&s, &labels(&[("app", "web")])));
        assert!(!selector_matches(
            &s,
            &labels(&[("app", "web"), ("tier", "cache")])
        ));
    }

    #[test]
    fn in_needs_the_label_with_one_of_the_values() {
        let s = selector(
            &[],
            vec![requirement("zone", SelectorOperator::In, &["a", "b"])],
        );
        assert!(selector_matches(&s, &labels(&[("zone", "b")])));
        assert!(!selector_matches(&s, &labels(&[("zone", "c")])));
        assert!(!selector_matches(&s, &labels(&[])));
    }

    #[test]
    fn not_in_holds_when_absent_or_another_value() {
        let s = selector(
            &[],
            vec![requirement("zone", SelectorOperator::NotIn, &["a"])],
        );
        assert!(selector_matches(&s, &labels(&[("zone", "b")])));
        assert!(selector_matches(&s, &labels(&[])));
        assert!(!selector_matches(&s, &labels(&[("zone", "a")])));
    }

    #[test]
    fn exists_and_does_not_exist_look_at_the_key_only() {
        let exists = selector(
            &[],
            vec![requirement("zone", SelectorOperator::Exists, &[])],
        );
        let absent = selector(
            &[],
            vec![requirement("zone", SelectorOperator::DoesNotExist, &[])],
        );
        let with = labels(&[("zone", "")]);
        let without = labels(&[("other", "x")]);
        assert!(selector_matches(&exists, &with));
        assert!(!selector_matches(&exists, &without));
        assert!(!selector_matches(&absent, &with));
        assert!(selector_matches(&absent, &without));
    }

    #[test]
    fn labels_and_expressions_combine_with_and() {
        let s = selector(
            &[("app", "web")],
            vec![requirement("track", SelectorOperator::NotIn, &["canary"])],
        );
        assert!(selector_matches(&s, &labels(&[("app", "web")])));
        assert!(!selector_matches(
            &s,
            &labels(&[("app", "web"), ("track", "canary")])
        ));
        assert!(!selector_matches(&s, &labels(&[("track", "stable")])));
    }

    #[test]
    fn the_empty_selector_matches_everything_as_in_kubernetes() {
        assert!(selector_matches(&PodSelector::default(), &labels(&[])));
    }
}
