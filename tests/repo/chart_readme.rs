//! The chart's README (what `helm show readme` and Artifact Hub show) names every top-level
//! value of `values.yaml` in its table, and nothing that is not one.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_chart_readme_names_every_top_level_value() {
    let values: BTreeSet<String> = read("charts/consul-elector/values.yaml")
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_alphabetic()))
        .filter_map(|line| line.split(':').next())
        .map(str::to_owned)
        .collect();
    let readme = read("charts/consul-elector/README.md");
    let table = readme
        .split("| Value | What it sets |")
        .nth(1)
        .expect("the README's values table");
    let named: BTreeSet<String> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| cell.split(','))
        .map(|name| name.trim().trim_matches('`').to_owned())
        .collect();
    let missing: Vec<_> = values.difference(&named).collect();
    let unknown: Vec<_> = named.difference(&values).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "values the README's table misses: {missing:?}; names in it that are no value: {unknown:?}"
    );
}
