//! How the sandbox prints: one aligned timeline row per observed change of the election, and
//! ANSI colour only when stdout is a terminal (and `NO_COLOR` is unset).
//!
//! ```text
//!      TIME  STEP               LEADER  TOKEN  PHASE     PODS (role label; ! not Ready, ~ terminating)
//!   +3.513s  1 elect            b2x7q   3      Elected   b2x7q:leader    k9d4m:follower  w5zt8:follower
//! ```
//!
//! A switchover request not decided yet follows the pods as `switchover-to: <pod or *>`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use super::snapshot::{PodState, Snapshot};

/// Widths of the fixed columns.
const TIME_WIDTH: usize = 9;
const STEP_WIDTH: usize = 18;
const LEADER_WIDTH: usize = 6;
const TOKEN_WIDTH: usize = 5;
const PHASE_WIDTH: usize = 9;
/// Width of one pod cell (`abcde:follower!`).
const POD_WIDTH: usize = 15;

/// Whether to colour, and the colours.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    colour: bool,
}

impl Style {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub(crate) fn detect() -> Self {
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        Self {
            colour: std::io::stdout().is_terminal() && !no_colour,
        }
    }

    /// Never colour.
    pub(crate) fn plain() -> Self {
        Self { colour: false }
    }

    fn paint(self, text: &str, sgr: &str) -> String {
        if self.colour && !text.is_empty() {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Bold.
    pub(crate) fn bold(self, text: &str) -> String {
        self.paint(text, "1")
    }

    /// Green: a leader, a step that reached its state.
    pub(crate) fn good(self, text: &str) -> String {
        self.paint(text, "32")
    }

    /// Yellow: a pod not Ready or terminating, a fenced election.
    pub(crate) fn warn(self, text: &str) -> String {
        self.paint(text, "33")
    }

    /// Red: a failed step, two leaders.
    pub(crate) fn bad(self, text: &str) -> String {
        self.paint(text, "1;31")
    }

    /// Dim: what has no value yet.
    pub(crate) fn dim(self, text: &str) -> String {
        self.paint(text, "2")
    }
}

/// `text` left-aligned in `width` columns, then styled (so escapes never break alignment).
fn cell(text: &str, width: usize, paint: impl FnOnce(&str) -> String) -> String {
    let padding = width.saturating_sub(text.chars().count());
    format!("{}{}", paint(text), " ".repeat(padding))
}

/// A pod's short name: the random suffix a ReplicaSet gives it (`web-5d9c7-b2x7q` → `b2x7q`).
pub(crate) fn short(name: &str) -> &str {
    name.rsplit('-').next().unwrap_or(name)
}

/// A duration as `1.234s` or, below a second, `84 ms`.
pub(crate) fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

/// Renders rows and remembers the last one, so only changes are printed.
#[derive(Debug)]
pub(crate) struct Timeline {
    style: Style,
    start: Instant,
    last: Option<String>,
}

impl Timeline {
    /// Rows timed from `start`, styled with `style`.
    pub(crate) fn new(style: Style, start: Instant) -> Self {
        Self {
            style,
            start,
            last: None,
        }
    }

    /// The column titles.
    pub(crate) fn header(&self) -> String {
        let line = format!(
            "{:>TIME_WIDTH$}  {:<STEP_WIDTH$} {:<LEADER_WIDTH$}  {:<TOKEN_WIDTH$}  {:<PHASE_WIDTH$} \
             PODS (role label; ! not Ready, ~ terminating)",
            "TIME", "STEP", "LEADER", "TOKEN", "PHASE"
        );
        self.style.bold(&line)
    }

    /// The row for `snapshot` during `step`, or `None` when it shows the same as the last row.
    pub(crate) fn row(&mut self, snapshot: &Snapshot, step: &str) -> Option<String> {
        let state = state_columns(snapshot, Style::plain());
        if self.last.as_ref() == Some(&state) {
            return None;
        }
        self.last = Some(state);
        let elapsed = snapshot.at.saturating_duration_since(self.start);
        let time = format!("+{:.3}s", elapsed.as_secs_f64());
        Some(format!(
            "{time:>TIME_WIDTH$}  {} {}",
            cell(step, STEP_WIDTH, |s| self.style.dim(s)),
            state_columns(snapshot, self.style)
        ))
    }
}

/// A plain one-line description of `snapshot`, for failure messages.
pub(crate) fn describe(snapshot: &Snapshot) -> String {
    let election = snapshot.election.as_ref();
    format!(
        "pods [{}]; status: phase {}, leader {}, token {}",
        pod_cells(snapshot, Style::plain()),
        election.and_then(|e| e.phase.as_deref()).unwrap_or("none"),
        election.and_then(|e| e.leader.as_deref()).unwrap_or("none"),
        election
            .and_then(|e| e.token)
            .map_or_else(|| "none".to_owned(), |t| t.to_string()),
    )
}

/// LEADER, TOKEN, PHASE and PODS.
fn state_columns(snapshot: &Snapshot, style: Style) -> String {
    let leaders: Vec<&str> = snapshot.leaders().map(|pod| short(&pod.name)).collect();
    let leader = match leaders.as_slice() {
        [] => cell("-", LEADER_WIDTH, |s| style.dim(s)),
        [one] => cell(one, LEADER_WIDTH, |s| style.good(&style.bold(s))),
        many => cell(&many.join("+"), LEADER_WIDTH, |s| style.bad(s)),
    };
    let election = snapshot.election.as_ref();
    let token = election
        .and_then(|e| e.token)
        .map_or_else(|| "-".to_owned(), |t| t.to_string());
    let phase = snapshot.phase().unwrap_or("-");
    let phase = cell(phase, PHASE_WIDTH, |s| match s {
        "Elected" => style.good(s),
        "-" => style.dim(s),
        _ => style.warn(s),
    });
    let request = election
        .and_then(|e| e.switchover.requested.as_deref())
        .map(|to| format!("  {}", style.warn(&format!("switchover-to: {to}"))))
        .unwrap_or_default();
    format!(
        "{leader}  {}  {phase} {}{request}",
        cell(&token, TOKEN_WIDTH, |s| s.to_owned()),
        pod_cells(snapshot, style)
    )
}

/// Every pod as `short:role` plus `!` (not Ready) or `~` (terminating).
fn pod_cells(snapshot: &Snapshot, style: Style) -> String {
    snapshot
        .pods
        .iter()
        .map(|pod| pod_cell(pod, style))
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end()
        .to_owned()
}

fn pod_cell(pod: &PodState, style: Style) -> String {
    let name = short(&pod.name);
    let role = pod.role.as_deref().unwrap_or("-");
    let marker = if pod.terminating {
        "~"
    } else if !pod.ready {
        "!"
    } else {
        ""
    };
    let painted = if pod.is_leader() {
        style.good(&style.bold(role))
    } else if pod.role.is_none() {
        style.dim(role)
    } else {
        role.to_owned()
    };
    let width = name.chars().count() + 1 + role.chars().count() + marker.len();
    let padding = " ".repeat(POD_WIDTH.saturating_sub(width));
    format!("{name}:{painted}{}{padding}", style.warn(marker))
}

#[cfg(test)]
mod tests {
    use super::super::objects::{FOLLOWER, LEADER};
    use super::super::snapshot::tests::{pod, snapshot};
    use super::*;

    #[test]
    fn rows_are_aligned_and_printed_only_on_change() {
        let start = Instant::now();
        let mut timeline = Timeline::new(Style::plain(), start);
        let mut snap = snapshot(
            vec![
                pod("web-5d9c7-b2x7q", Some(LEADER)),
                pod("web-5d9c7-k9d4m", Some(FOLLOWER)),
                pod("web-5d9c7-w5zt8", None),
            ],
            "Elected",
            Some("web-5d9c7-b2x7q"),
        );
        snap.at = start + Duration::from_millis(3513);
        let row = timeline.row(&snap, "1 elect").unwrap();
        assert_eq!(
            row,
            "  +3.513s  1 elect            b2x7q   7      Elected   \
             b2x7q:leader    k9d4m:follower  w5zt8:-"
        );
        let header = timeline.header();
        assert_eq!(header.find("LEADER"), row.find("b2x7q"));
        assert_eq!(header.find("PODS"), row.find("b2x7q:"));
        assert!(
            timeline.row(&snap, "2 other step").is_none(),
            "nothing changed"
        );

        snap.pods[1].ready = false;
        snap.pods[2].terminating = true;
        let row = timeline.row(&snap, "2 delete leader").unwrap();
        assert!(
            row.ends_with("b2x7q:leader    k9d4m:follower! w5zt8:-~"),
            "{row}"
        );
        if let Some(election) = snap.election.as_mut() {
            election.switchover.requested = Some("*".into());
        }
        let row = timeline.row(&snap, "4 switchover").unwrap();
        assert!(row.ends_with("w5zt8:-~  switchover-to: *"), "{row}");
        if let Some(election) = snap.election.as_mut() {
            election.switchover.requested = None;
        }
        assert!(
            timeline.row(&snap, "4 switchover").is_some(),
            "the request decided"
        );
    }

    #[test]
    fn two_leaders_are_shown_together() {
        let snap = snapshot(
            vec![
                pod("web-x-aaaaa", Some(LEADER)),
                pod("web-x-bbbbb", Some(LEADER)),
            ],
            "Elected",
            None,
        );
        let row = Timeline::new(Style::plain(), snap.at)
            .row(&snap, "s")
            .unwrap();
        assert!(row.contains(" aaaaa+bbbbb "), "{row}");
    }

    #[test]
    fn colour_codes_never_change_the_alignment() {
        let snap = snapshot(
            vec![pod("web-x-aaaaa", Some(LEADER)), pod("web-x-bbbbb", None)],
            "Fenced",
            None,
        );
        let strip = |text: &str| {
            let mut plain = String::new();
            let mut escape = false;
            for c in text.chars() {
                match (escape, c) {
                    (false, '\x1b') => escape = true,
                    (true, 'm') => escape = false,
                    (false, c) => plain.push(c),
                    (true, _) => {}
                }
            }
            plain
        };
        let coloured = Timeline::new(Style { colour: true }, snap.at).row(&snap, "s");
        let plain = Timeline::new(Style::plain(), snap.at).row(&snap, "s");
        assert_ne!(coloured, plain);
        assert_eq!(coloured.map(|row| strip(&row)), plain);
    }

    #[test]
    fn describe_names_every_pod_and_the_status() {
        let snap = snapshot(
            vec![pod("web-x-aaaaa", Some(FOLLOWER))],
            "Fenced",
            Some("web-x-aaaaa"),
        );
        assert_eq!(
            describe(&snap),
            "pods [aaaaa:follower]; status: phase Fenced, leader web-x-aaaaa, token 7"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(84)), "84 ms");
        assert_eq!(duration(Duration::from_millis(10_250)), "10.250s");
        assert_eq!(short("web-5d9c7-b2x7q"), "b2x7q");
        assert_eq!(short("plain"), "plain");
    }
}
