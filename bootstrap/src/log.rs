//! Logging through `tracing`, configured the way NCCL users configure NCCL's logs.
//!
//! `NCCL_DEBUG` sets the level (WARN, INFO, TRACE; VERSION prints only the version line and
//! warnings; NONE silences everything). Warnings are always shown for every subsystem; INFO
//! and TRACE are shown only for the subsystems `NCCL_DEBUG_SUBSYS` enables. Each subsystem
//! is a tracing target under `oxccl::` (the constants in [`target`]), so an application that
//! installs its own subscriber can filter the same way. `NCCL_DEBUG_FILE` sends the logs to
//! a file (`%h` → host name, `%p` → pid).

use std::str::FromStr;
use std::sync::OnceLock;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

use crate::config::Config;

/// Tracing targets, one per NCCL_DEBUG_SUBSYS subsystem.
pub mod target {
    pub const INIT: &str = "oxccl::init";
    pub const COLL: &str = "oxccl::coll";
    pub const P2P: &str = "oxccl::p2p";
    pub const SHM: &str = "oxccl::shm";
    pub const NET: &str = "oxccl::net";
    pub const GRAPH: &str = "oxccl::graph";
    pub const TUNING: &str = "oxccl::tuning";
    pub const ENV: &str = "oxccl::env";
    pub const ALLOC: &str = "oxccl::alloc";
    pub const CALL: &str = "oxccl::call";
    pub const PROXY: &str = "oxccl::proxy";
    pub const BOOTSTRAP: &str = "oxccl::bootstrap";
}

/// The subsystems in NCCL_DEBUG_SUBSYS order, with their targets.
const SUBSYSTEMS: &[(&str, &str)] = &[
    ("INIT", target::INIT),
    ("COLL", target::COLL),
    ("P2P", target::P2P),
    ("SHM", target::SHM),
    ("NET", target::NET),
    ("GRAPH", target::GRAPH),
    ("TUNING", target::TUNING),
    ("ENV", target::ENV),
    ("ALLOC", target::ALLOC),
    ("CALL", target::CALL),
    ("PROXY", target::PROXY),
    ("BOOTSTRAP", target::BOOTSTRAP),
];

/// `NCCL_DEBUG`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DebugLevel {
    None,
    Version,
    Warn,
    Info,
    Trace,
}

impl FromStr for DebugLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "NONE" | "" => DebugLevel::None,
            "VERSION" => DebugLevel::Version,
            "WARN" => DebugLevel::Warn,
            "INFO" => DebugLevel::Info,
            "TRACE" => DebugLevel::Trace,
            _ => return Err("expected NONE, VERSION, WARN, INFO or TRACE".into()),
        })
    }
}

/// `NCCL_DEBUG_SUBSYS`: which subsystems log at INFO and TRACE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subsystems {
    enabled: Vec<&'static str>,
}

impl Default for Subsystems {
    fn default() -> Self {
        // NCCL's default: INIT, BOOTSTRAP and ENV.
        "INIT,BOOTSTRAP,ENV".parse().expect("default subsystems parse")
    }
}

impl Subsystems {
    /// Whether `name` (e.g. "NET") is enabled.
    pub fn contains(&self, name: &str) -> bool {
        self.enabled.iter().any(|s| s.eq_ignore_ascii_case(name))
    }
}

impl FromStr for Subsystems {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (exclude, list) = match s.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let mut named = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word.eq_ignore_ascii_case("ALL") {
                named.extend(SUBSYSTEMS.iter().map(|(n, _)| *n));
                continue;
            }
            let (name, _) = SUBSYSTEMS
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(word))
                .ok_or_else(|| format!("unknown subsystem {word:?}"))?;
            named.push(*name);
        }
        let enabled = if exclude {
            SUBSYSTEMS.iter().map(|(n, _)| *n).filter(|n| !named.contains(n)).collect()
        } else {
            named
        };
        Ok(Subsystems { enabled })
    }
}

/// The filter that the config describes: warnings everywhere, INFO/TRACE per subsystem.
pub fn filter(config: &Config) -> Targets {
    let detail = match config.debug {
        DebugLevel::None => return Targets::new().with_default(LevelFilter::OFF),
        DebugLevel::Version | DebugLevel::Warn => return Targets::new().with_default(LevelFilter::WARN),
        DebugLevel::Info => LevelFilter::INFO,
        DebugLevel::Trace => LevelFilter::TRACE,
    };
    SUBSYSTEMS
        .iter()
        .filter(|(name, _)| config.debug_subsys.contains(name))
        .fold(Targets::new().with_default(LevelFilter::WARN), |t, (_, target)| t.with_target(*target, detail))
}

static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs a global subscriber from the config, once per process. Does nothing when the
/// application already installed one of its own (its filter then applies).
pub fn init(config: &Config) {
    INSTALLED.get_or_init(|| {
        let filter = filter(config);
        let prefix = format!("{}:{}", crate::host_name(), std::process::id());
        let result = match config.debug_file.as_deref().map(expand_file_name) {
            Some(path) => match std::fs::File::create(&path) {
                Ok(file) => tracing_subscriber::registry()
                    .with(
                        tracing_subscriber::fmt::layer()
                            .with_ansi(false)
                            .with_writer(std::sync::Mutex::new(file))
                            .with_thread_ids(true),
                    )
                    .with(filter)
                    .try_init(),
                Err(e) => {
                    eprintln!("oxccl: cannot open NCCL_DEBUG_FILE {path}: {e}; logging to stderr");
                    stderr_subscriber(filter)
                }
            },
            None => stderr_subscriber(filter),
        };
        // NCCL prints its version line at VERSION and at INFO and above, not at WARN.
        if result.is_ok() && (config.debug == DebugLevel::Version || config.debug >= DebugLevel::Info) {
            tracing::warn!(target: target::INIT, "{prefix} oxccl version {}", env!("CARGO_PKG_VERSION"));
        }
    });
}

fn stderr_subscriber(filter: Targets) -> Result<(), tracing_subscriber::util::TryInitError> {
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_thread_ids(true))
        .with(filter)
        .try_init()
}

/// Expands NCCL_DEBUG_FILE's `%h` (host) and `%p` (pid).
pub fn expand_file_name(pattern: &str) -> String {
    pattern.replace("%h", &crate::host_name()).replace("%p", &std::process::id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::level_filters::LevelFilter;
    use tracing_subscriber::filter::Targets;

    fn config(pairs: &[(&str, &str)]) -> Config {
        Config::from_vars(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap()
    }

    fn level(t: &Targets, target: &str) -> bool {
        t.would_enable(target, &tracing::Level::INFO)
    }

    #[test]
    fn subsystems_parse_with_exclusion_and_all() {
        let s: Subsystems = "^NET,SHM".parse().unwrap();
        assert!(s.contains("INIT") && !s.contains("NET") && !s.contains("SHM"));
        let s: Subsystems = "all".parse().unwrap();
        assert!(s.contains("PROXY"));
        assert!("NETT".parse::<Subsystems>().is_err());
    }

    #[test]
    fn info_only_for_enabled_subsystems_warnings_everywhere() {
        let t = filter(&config(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "NET")]));
        assert!(level(&t, target::NET));
        assert!(!level(&t, target::INIT));
        assert!(t.would_enable(target::INIT, &tracing::Level::WARN));
        let t = filter(&config(&[("NCCL_DEBUG", "WARN")]));
        assert!(!level(&t, target::BOOTSTRAP));
        let t = filter(&config(&[("NCCL_DEBUG", "NONE")]));
        assert!(!t.would_enable(target::INIT, &tracing::Level::ERROR));
        let _ = LevelFilter::OFF;
    }

    #[test]
    fn file_name_expands_host_and_pid() {
        let name = expand_file_name("/tmp/x.%h.%p");
        assert!(name.ends_with(&format!(".{}", std::process::id())));
        assert!(!name.contains('%'));
    }
}
