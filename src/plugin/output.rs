//! Rendering: JSON and YAML of the commands' serializable results, aligned text tables, and
//! times shown with their age.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::cli::OutputFormat;
use super::error::PluginError;

/// `value` as `format`: JSON or YAML through serde, the names of the `elections` it
/// concerns (`namespace`, `name`), or the text `table` makes (for `-o wide` too, unless the
/// caller has a wider one).
pub fn render<T: Serialize + ?Sized>(
    format: OutputFormat,
    value: &T,
    elections: impl FnOnce(&T) -> Vec<String>,
    table: impl FnOnce(&T) -> String,
) -> Result<String, PluginError> {
    match format {
        OutputFormat::Table | OutputFormat::Wide => Ok(table(value)),
        OutputFormat::Name => Ok(names(elections(value))),
        OutputFormat::Json => serde_json::to_string_pretty(value)
            .map(|mut text| {
                text.push('\n');
                text
            })
            .map_err(|e| PluginError::Render {
                format: "json",
                detail: e.to_string(),
            }),
        OutputFormat::Yaml => serde_saphyr::to_string(&value).map_err(|e| PluginError::Render {
            format: "yaml",
            detail: e.to_string(),
        }),
    }
}

/// `-o name`: `leaderelection.elector.dev/<name>` per line, as kubectl prints it.
pub fn names(elections: impl IntoIterator<Item = String>) -> String {
    elections
        .into_iter()
        .map(|name| format!("leaderelection.{}/{name}\n", crate::crd::GROUP))
        .collect()
}

/// Rows of cells printed in columns two spaces apart, like kubectl's tables.
#[derive(Debug, Clone, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first row is `headers`.
    pub fn new(headers: &[&str]) -> Self {
        Self {
            rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The aligned text, one line per row; the last column is not padded.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 < row.len() {
                    let pad = widths[c] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                } else {
                    line.push_str(cell);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// How long ago `then` was, kubectl style: `45s`, `3m12s`, `5h3m`, `2d4h`; `0s` for the
/// future (clocks differ).
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let seconds = now.duration_since(then).as_secs().max(0);
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

/// `then` as RFC 3339 (whole seconds) with its age: `2024-05-01T10:00:00Z (3m ago)`.
pub fn when(now: Timestamp, then: Timestamp) -> String {
    let whole = then.round(jiff::Unit::Second).unwrap_or(then);
    format!("{whole} ({} ago)", age(now, then))
}

/// A duration in seconds with millisecond precision, as the switchover prints it.
pub fn seconds(duration: SignedDuration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}

/// An optional cell: the value, or `-` (kubectl's placeholder) when absent.
pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = at("2024-05-01T10:00:00Z");
        assert_eq!(age(now, at("2024-05-01T09:59:15Z")), "45s");
        assert_eq!(age(now, at("2024-05-01T09:57:00Z")), "3m");
        assert_eq!(age(now, at("2024-05-01T09:56:48Z")), "3m12s");
        assert_eq!(age(now, at("2024-05-01T04:57:00Z")), "5h3m");
        assert_eq!(age(now, at("2024-04-29T06:00:00Z")), "2d4h");
        assert_eq!(age(now, at("2024-05-01T10:00:05Z")), "0s", "a clock ahead");
        assert_eq!(
            when(now, at("2024-05-01T09:57:00.400Z")),
            "2024-05-01T09:57:00Z (2m59s ago)"
        );
    }

    #[test]
    fn tables_align_columns_two_spaces_apart() {
        let mut table = Table::new(&["POD", "ELIGIBLE", "REASON"]);
        table.row(vec!["web-0".into(), "true".into(), "-".into()]);
        table.row(vec!["web-10".into(), "false".into(), "NotReady".into()]);
        assert_eq!(
            table.render(),
            "POD     ELIGIBLE  REASON\n\
             web-0   true      -\n\
             web-10  false     NotReady\n"
        );
    }

    #[test]
    fn json_and_yaml_come_from_serde() {
        let value = serde_json::json!({"leader": "web-0", "token": 7});
        let json = render(
            OutputFormat::Json,
            &value,
            |_| Vec::new(),
            |_| String::new(),
        )
        .expect("json");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).expect("parses"),
            value
        );
        let yaml = render(
            OutputFormat::Yaml,
            &value,
            |_| Vec::new(),
            |_| String::new(),
        )
        .expect("yaml");
        assert!(yaml.contains("leader: web-0"), "{yaml}");
        assert!(yaml.contains("token: 7"), "{yaml}");
        let table = render(
            OutputFormat::Table,
            &value,
            |_| Vec::new(),
            |v| v["leader"].to_string(),
        )
        .expect("table");
        assert_eq!(table, "\"web-0\"");
    }
}
