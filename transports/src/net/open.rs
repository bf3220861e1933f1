//! Choosing the net, as `NCCL_NET_PLUGIN` and `NCCL_NET` say.
//!
//! Candidates are the plugins first, in the order named, then the internal nets the caller
//! passes (oxccl's socket net). `NCCL_NET=<name>` keeps only the net of that name (compared
//! without case, as NCCL does). A candidate is taken when it loads, its `init` succeeds and
//! it has a device (checked with an `init`/`finalize` of its own, as NCCL does for each
//! communicator).
//!
//! Unlike NCCL, which logs and moves on to its internal nets, a plugin that was asked for
//! and cannot be used is an error naming the plugin and what failed: a job meant for a
//! fabric must not run over sockets without anyone noticing. Plugins named in a list that
//! are skipped because a later one works are logged as warnings. With `NCCL_NET_PLUGIN`
//! unset, `libnccl-net.so` is tried as NCCL tries it: its absence is no error, and one that
//! cannot be used (a vendor's plugin on a machine without its NIC) is a warning; the
//! internal net is used then, as in NCCL.

use std::sync::Arc;

use oxccl_bootstrap::config::NetPlugins;

use super::plugin::{self, DEFAULT_LIBRARY};
use super::{CommConfig, Net};
use crate::{Error, Result};

/// The net that `plugins` (NCCL_NET_PLUGIN) and `name` (NCCL_NET) pick: the first usable
/// plugin, else the first of `internal` (in that order) whose name `name` allows and that
/// has a device.
pub fn open(plugins: &NetPlugins, name: Option<&str>, internal: Vec<Arc<dyn Net>>) -> Result<Arc<dyn Net>> {
    let (specs, optional) = match plugins {
        NetPlugins::Default => (vec![DEFAULT_LIBRARY.to_string()], true),
        NetPlugins::None => (Vec::new(), false),
        NetPlugins::Named(names) => (names.clone(), false),
    };
    let wanted = |net: &dyn Net| name.is_none_or(|name| name.eq_ignore_ascii_case(net.name()));
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    for spec in &specs {
        let plugin = match plugin::load(spec) {
            Ok(plugin) => plugin,
            Err(e) if optional && plugin::is_not_found(&e) => {
                tracing::debug!(target: "oxccl::net", "NET/Plugin: no {spec} ({e}); using the internal net");
                continue;
            }
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        seen.push(format!("{} ({})", plugin.name(), plugin.path()));
        if !wanted(plugin.as_ref()) {
            tracing::info!(target: "oxccl::net", "NET/Plugin: {} is not the net NCCL_NET names", plugin.label());
            continue;
        }
        match probe(plugin.as_ref()) {
            Ok(()) => {
                for failure in &failures {
                    tracing::warn!(target: "oxccl::net", "NET/Plugin: skipped: {failure}");
                }
                tracing::info!(target: "oxccl::net", "NET/Plugin: using {}", plugin.label());
                return Ok(plugin);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    if optional {
        for failure in &failures {
            tracing::warn!(target: "oxccl::net", "NET/Plugin: not using {DEFAULT_LIBRARY} (NCCL_NET_PLUGIN is unset): {failure}");
        }
    } else if !failures.is_empty() {
        return Err(Error::Plugin { plugin: "NCCL_NET_PLUGIN".into(), call: "choosing a net".into(), reason: failures.join("; ") });
    }
    for net in internal {
        seen.push(net.name().to_string());
        if wanted(net.as_ref()) && net.devices()? > 0 {
            tracing::info!(target: "oxccl::net", "NET: using the internal {} net", net.name());
            return Ok(net);
        }
    }
    Err(Error::InvalidArgument(format!("NCCL_NET={}: no net of that name with a device (have: {})", name.unwrap_or(""), seen.join(", "))))
}

/// Whether `net` initializes and has a device.
fn probe(net: &dyn Net) -> Result<()> {
    let context = net.init(0, &CommConfig::default())?;
    let devices = net.devices();
    net.finalize(context)?;
    match devices? {
        0 => Err(Error::Unsupported(format!("net {} has no device", net.name()))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::socket::SocketNet;

    fn socket() -> Vec<Arc<dyn Net>> {
        vec![Arc::new(SocketNet::new(std::net::Ipv4Addr::LOCALHOST.into()))]
    }

    #[test]
    fn without_a_plugin_the_internal_net_is_used() {
        // No libnccl-net.so on this machine's library path: its absence is no error.
        assert_eq!(open(&NetPlugins::Default, None, socket()).unwrap().name(), "Socket");
        assert_eq!(open(&NetPlugins::None, Some("socket"), socket()).unwrap().name(), "Socket");
    }

    #[test]
    fn a_missing_plugin_or_net_is_an_error_naming_it() {
        let missing = NetPlugins::Named(vec!["nosuchfabric".into()]);
        let err = open(&missing, None, socket()).err().expect("a missing plugin fails").to_string();
        assert!(err.contains("nosuchfabric") && err.contains("libnccl-net-nosuchfabric.so") && err.contains("dlopen"), "{err}");
        let err = open(&NetPlugins::None, Some("IB"), socket()).err().expect("no IB net").to_string();
        assert!(err.contains("NCCL_NET=IB") && err.contains("have: Socket"), "{err}");
    }
}
