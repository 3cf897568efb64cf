//! The `bench` command line: which scenarios to run, at which sizes, and where the JSON
//! report goes.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Invocation;
use crate::sandbox::ConsulKind;

/// A benchmark scenario. Adding one: a variant here, its name in [`ScenarioName::ALL`], a
/// module under `scenarios/` and one arm in `scenarios::run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioName {
    /// N elections x P pods from cold: operator start -> every election led.
    Converge,
    /// Consul and API request rates once converged.
    Steady,
    /// SIGKILL and start again: what changes, and how soon every session is renewed.
    Restart,
    /// Leader deleted or NotReady in one election at a time while the others idle.
    Failover,
    /// A Deployment of 5 replicas rolled: how many leader transitions.
    RollingUpdate,
    /// Switchovers requested by annotation in one election at a time while the others idle.
    Switchover,
}

impl ScenarioName {
    /// Every scenario, in the order `--quick` runs them.
    pub const ALL: [ScenarioName; 6] = [
        Self::Converge,
        Self::Steady,
        Self::Restart,
        Self::Failover,
        Self::RollingUpdate,
        Self::Switchover,
    ];

    /// The name on the command line and in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Converge => "converge",
            Self::Steady => "steady",
            Self::Restart => "restart",
            Self::Failover => "failover",
            Self::RollingUpdate => "rolling-update",
            Self::Switchover => "switchover",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// How big a scenario's population is and how long it observes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    /// LeaderElections.
    pub elections: usize,
    /// Candidate pods per election.
    pub pods: usize,
    /// Namespaces the elections are spread over (round-robin).
    pub namespaces: usize,
    /// Failover rounds (`failover`), each in the next election.
    pub failovers: usize,
    /// Switchovers to any other pod (`switchover`), each in the next election.
    pub switchovers: usize,
    /// How long `steady` counts requests.
    pub steady_window: Duration,
}

impl Sizes {
    /// The sizes of the targets.
    pub fn full() -> Self {
        Self {
            elections: 10_000,
            pods: 3,
            namespaces: 5,
            failovers: 50,
            switchovers: 50,
            steady_window: Duration::from_secs(30),
        }
    }

    /// Small sizes: every scenario in well under two minutes together.
    pub fn quick() -> Self {
        Self {
            elections: 20,
            pods: 3,
            namespaces: 2,
            failovers: 6,
            switchovers: 4,
            steady_window: Duration::from_millis(7_500),
        }
    }
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The scenarios to run, in order.
    pub scenarios: Vec<ScenarioName>,
    /// Their sizes.
    pub sizes: Sizes,
    /// Where to write the JSON report, if anywhere.
    pub json: Option<PathBuf>,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// Which Consul the operator runs against.
    pub consul: ConsulKind,
}

/// The usage text.
pub const USAGE: &str = "\
usage: cargo run --release -p testkit --bin bench -- [SCENARIO...] [OPTIONS]
       cargo run --release -p testkit --bin bench -- --quick

Runs the real operator binary (built in the profile bench was built with) against the test
cluster (kube-apiserver v1.20.2) and Consul (the emulator, or a real dev agent with --consul
real), and reports from recorded history (watch events, Consul's request counters, the API
server's metrics, /proc of the operator, the cluster and a real Consul): a table on stdout
and optionally a JSON file. Exits non-zero when a scenario fails its safety check (two pods
labelled leader in one election at one resourceVersion, a fencing token going backwards) or
does not reach its expected state in time.

scenarios: converge, steady, restart, failover, rolling-update, switchover

options:
  --quick             every scenario (or the ones named) at small sizes
  --elections N       LeaderElections (default 10000; quick 20)
  --pods P            candidate pods per election (default 3)
  --namespaces M      namespaces the elections are spread over (default 5; quick 2)
  --failovers K       failover rounds (default 50; quick 6)
  --switchovers K     switchovers to any other pod (default 50; quick 4), then one to a
                      named pod and one refused
  --steady-seconds S  how long `steady` counts requests (default 30; quick 7.5)
  --consul KIND       emulator (default) or real: a real `consul agent -dev` from CONSUL_BIN
                      (required then); every scenario runs on both, the requests counted by
                      a proxy in front of the real server
  --json FILE         also write the report as JSON
  -h, --help          show this help

environment:
  CONSUL_BIN            the consul binary for --consul real (1.0 or later)
  SANDBOX_OPERATOR_LOG  the operator's log filter (default warn)";

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Invocation<Options>, String> {
    let args: Vec<String> = args.into_iter().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut options = Options {
        scenarios: Vec::new(),
        sizes: if quick { Sizes::quick() } else { Sizes::full() },
        json: None,
        quick,
        consul: ConsulKind::default(),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "--quick" => {}
            "--elections" => options.sizes.elections = count(&arg, &value(&arg)?)?,
            "--pods" => options.sizes.pods = count(&arg, &value(&arg)?)?,
            "--namespaces" => options.sizes.namespaces = count(&arg, &value(&arg)?)?,
            "--failovers" => options.sizes.failovers = count(&arg, &value(&arg)?)?,
            "--switchovers" => options.sizes.switchovers = count(&arg, &value(&arg)?)?,
            "--steady-seconds" => options.sizes.steady_window = seconds(&arg, &value(&arg)?)?,
            "--json" => options.json = Some(PathBuf::from(value(&arg)?)),
            "--consul" => options.consul = ConsulKind::parse(&value(&arg)?)?,
            name => match ScenarioName::parse(name) {
                Some(scenario) if !options.scenarios.contains(&scenario) => {
                    options.scenarios.push(scenario);
                }
                Some(_) => {}
                None => return Err(format!("unknown argument {name:?}\n\n{USAGE}")),
            },
        }
    }
    if options.scenarios.is_empty() {
        if !quick {
            return Err(format!("name a scenario or give --quick\n\n{USAGE}"));
        }
        options.scenarios = ScenarioName::ALL.to_vec();
    }
    Ok(Invocation::Run(options))
}

/// A positive count.
fn count(flag: &str, value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "{flag} needs a positive whole number, not {value:?}"
        )),
    }
}

/// A positive number of seconds, fractions allowed.
fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    match value.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{flag} needs a positive number of seconds, not {value:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(args.iter().map(|a| (*a).to_owned()))? {
            Invocation::Run(options) => Ok(options),
            Invocation::Help => Err("help".to_owned()),
        }
    }

    #[test]
    fn a_named_scenario_runs_at_full_size_with_overrides() {
        let options = run(&["converge", "--elections", "1000", "--json", "o.json"]).unwrap();
        assert_eq!(options.scenarios, [ScenarioName::Converge]);
        assert_eq!(options.sizes.elections, 1000);
        assert_eq!(options.sizes.namespaces, Sizes::full().namespaces);
        assert_eq!(options.json, Some(PathBuf::from("o.json")));
        assert!(!options.quick);
        assert_eq!(options.consul, ConsulKind::Emulator);
        let options = run(&["steady", "--consul", "real", "--quick"]).unwrap();
        assert_eq!(options.consul, ConsulKind::Real);
    }

    #[test]
    fn quick_runs_every_scenario_small_unless_some_are_named() {
        let options = run(&["--quick"]).unwrap();
        assert_eq!(options.scenarios, ScenarioName::ALL);
        assert_eq!(options.sizes, Sizes::quick());
        let options = run(&["failover", "--quick", "--elections", "3"]).unwrap();
        assert_eq!(options.scenarios, [ScenarioName::Failover]);
        assert_eq!(options.sizes.elections, 3);
        assert_eq!(options.sizes.failovers, Sizes::quick().failovers);
        let options = run(&["switchover", "--elections", "1", "--switchovers", "9"]).unwrap();
        assert_eq!(options.scenarios, [ScenarioName::Switchover]);
        assert_eq!(options.sizes.switchovers, 9);
    }

    #[test]
    fn bad_arguments_are_refused() {
        for args in [
            &[][..],
            &["converge", "--elections", "0"],
            &["converge", "--elections"],
            &["failback"],
            &["switchover", "--switchovers", "0"],
            &["steady", "--steady-seconds", "-1"],
            &["steady", "--consul"],
            &["steady", "--consul", "consul"],
        ] {
            assert!(run(args).is_err(), "{args:?}");
        }
        assert_eq!(run(&["-h"]).unwrap_err(), "help");
    }
}
