//! Completion through kubectl (1.26 and later): for `kubectl elector <words> <TAB>`, kubectl
//! runs `kubectl_complete-elector <words> <word being typed>` from the PATH and offers what it
//! prints, one choice per line (`value<TAB>description`), then `:<directive>` (Cobra's shell
//! completion directives). [`super::cli::KUBECTL_COMPLETE`] is that executable: it runs `kubectl-elector
//! __complete`, which answers here.
//!
//! What is offered comes from the command line's own definition ([`Cli`]): the subcommands,
//! their flags, the values of `-o` and of `completion`; and, read from the cluster, the
//! elections of the namespace, and an election's candidates for `why` and `--to`.

use clap::CommandFactory;

use super::cli::{Cli, Command, RequestTimeout};
use super::connect;
use super::status::{self, Scope};

/// Cobra's `ShellCompDirectiveNoFileComp`: the shell offers no file names instead.
const NO_FILES: u32 = 4;
/// Cobra's `ShellCompDirectiveDefault`: the shell may offer file names (for `--kubeconfig`).
const FILES: u32 = 0;

/// Global flags whose value is the next word.
const GLOBAL_VALUED: [&str; 6] = [
    "-n",
    "--namespace",
    "-o",
    "--output",
    "--context",
    "--kubeconfig",
];

/// What the word being typed should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// A subcommand.
    Subcommand,
    /// A flag of `subcommand` (or a global one).
    Flag {
        /// The subcommand typed so far.
        subcommand: Option<String>,
    },
    /// The value of `-o`.
    Output,
    /// The shell of `completion`.
    Shell,
    /// A LeaderElection of the namespace.
    Election,
    /// A candidate of `election`.
    Candidate {
        /// The election.
        election: String,
    },
    /// A file (`--kubeconfig`).
    File,
    /// Nothing this plugin can name (a duration, a context).
    Nothing,
}

/// What `words` (the command line before the word being typed) and `current` (the word being
/// typed) ask for.
pub fn wanted(words: &[String], current: &str) -> Wanted {
    if let Some(flag) = words.last().map(String::as_str)
        && takes_value(flag)
    {
        return match flag {
            "-o" | "--output" => Wanted::Output,
            "--kubeconfig" => Wanted::File,
            "--to" => candidate_of(words)
                .map_or(Wanted::Nothing, |election| Wanted::Candidate { election }),
            _ => Wanted::Nothing,
        };
    }
    let positionals = positionals(words);
    let subcommand = positionals.first().cloned();
    if current.starts_with('-') {
        return Wanted::Flag { subcommand };
    }
    match (subcommand.as_deref(), positionals.len()) {
        (None, _) => Wanted::Subcommand,
        (Some("completion"), 1) => Wanted::Shell,
        (Some("status" | "switchover" | "why" | "history" | "pause" | "resume"), 1) => {
            Wanted::Election
        }
        (Some("why"), 2) => Wanted::Candidate {
            election: positionals[1].clone(),
        },
        _ => Wanted::Nothing,
    }
}

/// Whether `flag` takes the next word as its value.
fn takes_value(flag: &str) -> bool {
    GLOBAL_VALUED.contains(&flag) || ["--request-timeout", "--to", "--timeout"].contains(&flag)
}

/// The words that are neither flags nor flag values.
fn positionals(words: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut skip = false;
    for word in words {
        if skip {
            skip = false;
        } else if word.starts_with('-') {
            skip = !word.contains('=') && takes_value(word);
        } else {
            found.push(word.clone());
        }
    }
    found
}

/// The election of a `switchover` whose `--to` is being typed.
fn candidate_of(words: &[String]) -> Option<String> {
    let positionals = positionals(words);
    (positionals.first().map(String::as_str) == Some("switchover"))
        .then(|| positionals.get(1).cloned())
        .flatten()
}

/// The value of global flag `long` (or `short`) among `words`.
fn flag_value(words: &[String], short: Option<&str>, long: &str) -> Option<String> {
    let prefix = format!("{long}=");
    words.iter().enumerate().find_map(|(i, word)| {
        if Some(word.as_str()) == short || word == long {
            words.get(i + 1).cloned()
        } else {
            word.strip_prefix(&prefix).map(str::to_owned)
        }
    })
}

/// The choices the command line's definition gives for `wanted`, with descriptions.
pub fn static_choices(wanted: &Wanted) -> Vec<(String, String)> {
    let cli = Cli::command();
    let about = |command: &clap::Command| {
        command
            .get_about()
            .map(|about| about.to_string())
            .unwrap_or_default()
    };
    match wanted {
        Wanted::Subcommand => cli
            .get_subcommands()
            .filter(|command| !command.is_hide_set())
            .map(|command| (command.get_name().to_owned(), about(command)))
            .collect(),
        Wanted::Flag { subcommand } => {
            let command = subcommand
                .as_deref()
                .and_then(|name| cli.find_subcommand(name))
                .unwrap_or(&cli);
            command
                .get_arguments()
                .chain(cli.get_arguments())
                .filter_map(|arg| {
                    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                    arg.get_long().map(|long| (format!("--{long}"), help))
                })
                .collect()
        }
        Wanted::Output => [
            ("table", "aligned text"),
            ("wide", "the table with more columns"),
            ("name", "the elections' names"),
            ("json", "JSON"),
            ("yaml", "YAML"),
        ]
        .into_iter()
        .map(|(value, help)| (value.to_owned(), help.to_owned()))
        .collect(),
        Wanted::Shell => ["bash", "zsh", "fish", "powershell", "elvish", "kubectl"]
            .into_iter()
            .map(|shell| (shell.to_owned(), String::new()))
            .collect(),
        _ => Vec::new(),
    }
}

/// What to print: the `choices` that start with `current`, one per line, then the directive.
pub fn render(choices: &[(String, String)], current: &str, wanted: &Wanted) -> String {
    let mut text = String::new();
    for (value, help) in choices
        .iter()
        .filter(|(value, _)| value.starts_with(current))
    {
        let help = help.lines().next().unwrap_or_default();
        if help.is_empty() {
            text.push_str(&format!("{value}\n"));
        } else {
            text.push_str(&format!("{value}\t{help}\n"));
        }
    }
    let directive = if *wanted == Wanted::File {
        FILES
    } else {
        NO_FILES
    };
    text.push_str(&format!(":{directive}\n"));
    text
}

/// Answers `kubectl-elector __complete <args>`: `args` are the words after the plugin's name,
/// the last the one being typed. Elections and candidates are read from the cluster of the
/// words' `--kubeconfig`, `--context` and `-n` (each read bounded); one that cannot be read
/// offers nothing.
pub async fn complete(args: &[String]) -> String {
    let (current, words) = match args.split_last() {
        Some((current, words)) => (current.as_str(), words),
        None => ("", args),
    };
    let wanted = wanted(words, current);
    let mut choices = static_choices(&wanted);
    if matches!(wanted, Wanted::Election | Wanted::Candidate { .. }) {
        choices = from_cluster(words, &wanted).await;
    }
    render(&choices, current, &wanted)
}

/// The elections of the namespace, or an election's candidates, as the cluster has them.
async fn from_cluster(words: &[String], wanted: &Wanted) -> Vec<(String, String)> {
    let cli = Cli {
        namespace: flag_value(words, Some("-n"), "--namespace"),
        output: Default::default(),
        kubeconfig: flag_value(words, None, "--kubeconfig").map(Into::into),
        context: flag_value(words, None, "--context"),
        request_timeout: RequestTimeout(Some(std::time::Duration::from_secs(5))),
        command: Command::List {
            all_namespaces: false,
            watch: false,
        },
    };
    let Ok(client) = connect::client(&cli).await else {
        return Vec::new();
    };
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let scope = match wanted {
        Wanted::Candidate { election } => Scope::One {
            namespace: &namespace,
            name: election,
        },
        _ => Scope::Namespace(&namespace),
    };
    let Ok(views) = status::collect(client, scope, None).await else {
        return Vec::new();
    };
    match wanted {
        Wanted::Candidate { .. } => views
            .iter()
            .flat_map(|view| &view.candidates)
            .map(|c| {
                let state = if c.eligible {
                    "eligible"
                } else {
                    "not eligible"
                };
                (c.pod.clone(), state.to_owned())
            })
            .collect(),
        _ => views
            .iter()
            .map(|view| {
                let leader = view.leader.as_deref().unwrap_or("no leader");
                (view.name.clone(), format!("led by {leader}"))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn each_position_asks_for_what_the_command_line_takes_there() {
        assert_eq!(wanted(&[], "st"), Wanted::Subcommand);
        assert_eq!(wanted(&words("-n prod"), ""), Wanted::Subcommand);
        assert_eq!(wanted(&words("status"), ""), Wanted::Election);
        assert_eq!(wanted(&words("-n prod status"), "w"), Wanted::Election);
        assert_eq!(wanted(&words("status web"), ""), Wanted::Nothing);
        assert_eq!(
            wanted(&words("why web"), ""),
            Wanted::Candidate {
                election: "web".into()
            }
        );
        assert_eq!(
            wanted(&words("switchover web --to"), ""),
            Wanted::Candidate {
                election: "web".into()
            }
        );
        assert_eq!(wanted(&words("list -o"), "j"), Wanted::Output);
        assert_eq!(wanted(&words("--kubeconfig"), ""), Wanted::File);
        assert_eq!(
            wanted(&words("switchover web --timeout"), ""),
            Wanted::Nothing
        );
        assert_eq!(wanted(&words("completion"), ""), Wanted::Shell);
        assert_eq!(
            wanted(&words("switchover"), "--t"),
            Wanted::Flag {
                subcommand: Some("switchover".into())
            }
        );
    }

    #[test]
    fn choices_come_from_the_command_line_and_end_with_the_directive() {
        let subcommands = static_choices(&Wanted::Subcommand);
        let text = render(&subcommands, "s", &Wanted::Subcommand);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().any(|l| l.starts_with("status\t")), "{text}");
        assert!(
            lines.iter().any(|l| l.starts_with("switchover\t")),
            "{text}"
        );
        assert!(
            !text.contains("list"),
            "only those that start with s: {text}"
        );
        assert_eq!(lines.last(), Some(&":4"));
        let flags = static_choices(&Wanted::Flag {
            subcommand: Some("switchover".into()),
        });
        let text = render(&flags, "--t", &Wanted::Nothing);
        assert!(
            text.contains("--to\t") && text.contains("--timeout\t"),
            "{text}"
        );
        let global = render(&flags, "--req", &Wanted::Nothing);
        assert!(global.starts_with("--request-timeout\t"), "{global}");
        assert_eq!(
            render(&static_choices(&Wanted::Output), "w", &Wanted::Output),
            "wide\tthe table with more columns\n:4\n"
        );
        assert_eq!(render(&[], "", &Wanted::File), ":0\n");
    }

    #[test]
    fn the_script_runs_the_plugin_with_every_word() {
        let script = crate::plugin::cli::KUBECTL_COMPLETE;
        assert!(script.starts_with("#!/bin/sh\n"), "{script}");
        assert!(
            script.contains(r#"exec kubectl-elector __complete "$@""#),
            "{script}"
        );
    }
}
