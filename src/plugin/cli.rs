//! The plugin's command line: `kubectl elector <command>` with kubectl's `-n`, `-o`,
//! `--context` and `--kubeconfig` (kubectl does not pass its own flags on to a plugin).

use std::path::PathBuf;

use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// `kubectl elector`: inspect LeaderElections and move their leadership.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(name = "kubectl-elector", bin_name = "kubectl elector", version)]
pub struct Cli {
    /// The namespace (default: the kubeconfig context's, or the pod's in a cluster).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t, global = true)]
    pub output: OutputFormat,

    /// The kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`, else the pod's
    /// service account in a cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// How long to wait for each request to the API server and to Consul before giving up
    /// (Go duration such as 5s or 1m; 0, the default, leaves the clients' own bounds).
    #[arg(long, global = true, default_value = "0", value_parser = parse_request_timeout)]
    pub request_timeout: RequestTimeout,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The plugin's commands.
#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Leader, fencing token, candidates, last switchover and the Consul holder of one
    /// election, or of every election of the namespace.
    Status {
        /// The election (default: every election of the namespace).
        election: Option<String>,
        /// Every election of every namespace.
        #[arg(short = 'A', long, conflicts_with = "election")]
        all_namespaces: bool,
        /// After the first output, print each election again whenever what is shown changes,
        /// until interrupted.
        #[arg(short, long)]
        watch: bool,
    },
    /// One line per election: phase, leader, fencing token, transitions, Ready.
    List {
        /// Every election of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// After the table, print a row whenever what an election's row shows changes, until
        /// interrupted (like `kubectl get --watch`).
        #[arg(short, long)]
        watch: bool,
    },
    /// Prints a shell completion script of `kubectl-elector` (for example `source
    /// <(kubectl elector completion bash)`), or with `kubectl` the `kubectl_complete-elector`
    /// executable through which kubectl 1.26+ completes `kubectl elector` (save it on the
    /// PATH and make it executable).
    Completion {
        /// The shell, or `kubectl`.
        #[arg(value_parser = parse_completing)]
        shell: Completing,
    },
    /// Moves leadership to another pod and waits until the operator decided the request.
    Switchover {
        /// The election.
        election: String,
        /// The pod to lead (default: the best other eligible pod, by priority).
        #[arg(long)]
        to: Option<String>,
        /// How long to wait for the operator's decision (Go duration syntax: 60s, 2m).
        #[arg(long, default_value = "60s", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Explains why a pod leads or does not.
    Why {
        /// The election.
        election: String,
        /// The pod.
        pod: String,
    },
    /// The election's last leaderships, oldest first, as its status keeps them: which pod led,
    /// since when, for how long, with which fencing token, and why it stopped.
    History {
        /// The election.
        election: String,
        /// Show the election's recent events instead, oldest first (events expire, by default
        /// after an hour).
        #[arg(long)]
        events: bool,
    },
    /// Freezes the election (`spec.paused: true`): the leader keeps leading and nothing
    /// moves until `resume`.
    Pause {
        /// The election.
        election: String,
    },
    /// Resumes a paused election (`spec.paused: false`).
    Resume {
        /// The election.
        election: String,
    },
}

impl Cli {
    /// Whether the command keeps printing until interrupted (`list` or `status` with
    /// `--watch`): run it with [`super::watch_command`], not [`super::run`].
    pub fn watches(&self) -> bool {
        matches!(
            self.command,
            Command::List { watch: true, .. } | Command::Status { watch: true, .. }
        )
    }
}

/// The `kubectl_complete-elector` executable (see [`super::complete`]): shipped beside the
/// plugin, and printed by `kubectl elector completion kubectl` for an install (krew's) that
/// has only the plugin.
pub const KUBECTL_COMPLETE: &str = include_str!("kubectl_complete-elector");

/// What `completion` prints a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completing {
    /// A shell's completion of `kubectl-elector`.
    Shell(clap_complete::Shell),
    /// kubectl's completion of `kubectl elector` (`kubectl_complete-elector`).
    Kubectl,
}

/// `completion <shell>`: a shell clap knows, or `kubectl`.
fn parse_completing(text: &str) -> Result<Completing, String> {
    if text == "kubectl" {
        return Ok(Completing::Kubectl);
    }
    clap_complete::Shell::from_str(text, true).map(Completing::Shell)
}

/// The completion script for `completing`.
pub fn completion(completing: Completing) -> String {
    let Completing::Shell(shell) = completing else {
        return KUBECTL_COMPLETE.to_owned();
    };
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "kubectl-elector", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// How results are printed.
#[derive(ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// Aligned text for people.
    #[default]
    Table,
    /// The table with more columns (`list`: how long the leader leads, how many candidates may
    /// lead, why the election is or is not Ready).
    Wide,
    /// `leaderelection.elector.dev/<name>` of each election concerned, for scripts.
    Name,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `--request-timeout`: a bound on each request, or none (`0`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<Duration>);

/// `--request-timeout`: `0`, or a positive Go duration.
fn parse_request_timeout(text: &str) -> Result<RequestTimeout, String> {
    if text.trim() == "0" {
        return Ok(RequestTimeout(None));
    }
    parse_timeout(text).map(|timeout| RequestTimeout(Some(timeout)))
}

/// `--timeout`: a positive Go duration.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match crate::consul::parse_go_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("the timeout must be positive".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-elector").chain(args.iter().copied()))
    }

    #[test]
    fn namespace_and_output_go_before_or_after_the_command() {
        let before = parse(&["-n", "prod", "-o", "json", "status", "web"]).expect("parses");
        let after = parse(&["status", "web", "-n", "prod", "-o", "json"]).expect("parses");
        assert_eq!(before, after);
        assert_eq!(before.namespace.as_deref(), Some("prod"));
        assert_eq!(before.output, OutputFormat::Json);
    }

    #[test]
    fn request_timeout_is_none_at_zero_and_a_positive_duration_otherwise() {
        assert_eq!(
            parse(&["list"]).expect("parses").request_timeout,
            RequestTimeout(None)
        );
        let bounded = parse(&["list", "--request-timeout", "5s"]).expect("parses");
        assert_eq!(
            bounded.request_timeout,
            RequestTimeout(Some(Duration::from_secs(5)))
        );
        assert!(parse(&["list", "--request-timeout", "soon"]).is_err());
        let names = parse(&["list", "-o", "name"]).expect("parses");
        assert_eq!(names.output, OutputFormat::Name);
        assert_eq!(
            parse(&["list", "-o", "wide"]).expect("parses").output,
            OutputFormat::Wide
        );
    }

    #[test]
    fn switchover_defaults_to_any_pod_within_a_minute() {
        let cli = parse(&["switchover", "web"]).expect("parses");
        assert_eq!(
            cli.command,
            Command::Switchover {
                election: "web".into(),
                to: None,
                timeout: Duration::from_secs(60),
            }
        );
        let cli =
            parse(&["switchover", "web", "--to", "web-2", "--timeout", "2m"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Switchover { to: Some(ref pod), timeout, .. }
                if pod == "web-2" && timeout == Duration::from_secs(120)
        ));
    }

    #[test]
    fn bad_timeouts_and_all_namespaces_with_a_name_are_refused() {
        assert!(parse(&["switchover", "web", "--timeout", "soon"]).is_err());
        assert!(parse(&["switchover", "web", "--timeout", "0s"]).is_err());
        assert!(parse(&["status", "web", "-A"]).is_err());
        assert!(parse(&["status", "-A"]).is_ok());
        assert!(parse(&["why", "web"]).is_err(), "why needs a pod");
        assert!(parse(&["status", "-o", "xml"]).is_err());
    }

    #[test]
    fn list_and_completion() {
        assert_eq!(
            parse(&["list", "-A"]).expect("parses").command,
            Command::List {
                all_namespaces: true,
                watch: false,
            }
        );
        assert_eq!(
            parse(&["list", "-w"]).expect("parses").command,
            Command::List {
                all_namespaces: false,
                watch: true,
            }
        );
        assert!(
            parse(&["status", "web", "--watch"])
                .expect("parses")
                .watches()
        );
        assert!(!parse(&["status", "web"]).expect("parses").watches());
        assert_eq!(
            parse(&["completion", "zsh"]).expect("parses").command,
            Command::Completion {
                shell: Completing::Shell(clap_complete::Shell::Zsh)
            }
        );
        assert!(parse(&["completion", "cmd"]).is_err());
        assert_eq!(
            parse(&["completion", "kubectl"]).expect("parses").command,
            Command::Completion {
                shell: Completing::Kubectl
            }
        );
        assert_eq!(completion(Completing::Kubectl), KUBECTL_COMPLETE);
        let bash = completion(Completing::Shell(clap_complete::Shell::Bash));
        assert!(
            bash.contains("kubectl-elector") && bash.contains("switchover"),
            "{bash}"
        );
    }

    #[test]
    fn kubeconfig_context_pause_and_resume() {
        let cli = parse(&[
            "pause",
            "web",
            "--context",
            "prod",
            "--kubeconfig",
            "/tmp/kc",
        ])
        .expect("parses");
        assert_eq!(
            cli.command,
            Command::Pause {
                election: "web".into()
            }
        );
        assert_eq!(cli.context.as_deref(), Some("prod"));
        assert_eq!(cli.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        let cli = parse(&["resume", "web"]).expect("parses");
        assert_eq!(
            cli.command,
            Command::Resume {
                election: "web".into()
            }
        );
        assert!(parse(&["pause"]).is_err(), "pause needs an election");
    }
}
