//! Which interfaces the socket Net takes as its devices, as NCCL's socket transport chooses
//! them (`ncclFindInterfaces`): every interface `NCCL_SOCKET_IFNAME` allows (and
//! `NCCL_SOCKET_FAMILY`), one address each; without a filter the `ib*` interfaces if there
//! are any, else every other interface except loopback and container or VM bridges, else
//! loopback. Used by oxccl's internal socket Net and by the plugin it exports.

use std::net::IpAddr;

use oxccl_bootstrap::iface::{AddressFamily, Interface};
use oxccl_bootstrap::Config;

use super::SocketDevice;

/// Interfaces NCCL's socket transport passes over unless nothing else is up.
const BRIDGES: &[&str] = &["docker", "virbr", "veth", "br-", "cni", "flannel"];
/// Devices at most (NCCL's MAX_IFS).
pub const MAX_DEVICES: usize = 16;

/// The devices among `interfaces` (the machine's, in the system's order) that `config`'s
/// filter allows, or NCCL's default tiers; an error naming the filter and the machine's
/// interfaces when none is usable.
pub fn choose_devices(interfaces: &[Interface], config: &Config) -> Result<Vec<SocketDevice>, String> {
    let family_fits = |addr: &IpAddr| match config.socket_family {
        Some(AddressFamily::V4) => addr.is_ipv4(),
        Some(AddressFamily::V6) => addr.is_ipv6(),
        None => true,
    };
    let link_local = |addr: &IpAddr| matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
    let usable: Vec<&Interface> = interfaces.iter().filter(|i| i.up && family_fits(&i.addr) && !link_local(&i.addr)).collect();
    let chosen: Vec<&Interface> = match &config.socket_ifname {
        Some(filter) => usable.iter().copied().filter(|i| filter.allows(&i.name)).collect(),
        None => {
            let infiniband: Vec<&Interface> = usable.iter().copied().filter(|i| i.name.starts_with("ib")).collect();
            let other: Vec<&Interface> = usable.iter().copied().filter(|i| !i.loopback && !BRIDGES.iter().any(|b| i.name.starts_with(b))).collect();
            let loopback: Vec<&Interface> = usable.iter().copied().filter(|i| i.loopback).collect();
            [infiniband, other, loopback].into_iter().find(|tier| !tier.is_empty()).unwrap_or_default()
        }
    };
    let mut devices: Vec<SocketDevice> = Vec::new();
    for interface in chosen {
        // One address per interface, the first the system lists (as NCCL takes it).
        if devices.len() < MAX_DEVICES && !devices.iter().any(|d| d.name == interface.name) {
            devices.push(SocketDevice::interface(&interface.name, interface.addr));
        }
    }
    if devices.is_empty() {
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        let filter = match &config.socket_ifname {
            Some(filter) => format!("NCCL_SOCKET_IFNAME {filter:?}"),
            None => "no NCCL_SOCKET_IFNAME".into(),
        };
        return Err(format!("no usable interface ({filter}; the machine has: {})", names.join(", ")));
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(name: &str, addr: &str) -> Interface {
        let addr: IpAddr = addr.parse().unwrap();
        Interface { name: name.into(), addr, prefix_len: Some(24), up: true, loopback: addr.is_loopback() }
    }

    fn names(devices: &[SocketDevice]) -> Vec<&str> {
        devices.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn devices_follow_the_filter_or_nccls_default_order() {
        let machine = [interface("lo", "127.0.0.1"), interface("docker0", "172.17.0.1"), interface("eth0", "10.0.0.2"), interface("eth0", "fe80::1"), interface("eth1", "10.1.0.2")];
        let config = |pairs: &[(&str, &str)]| Config::from_vars(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap();
        assert_eq!(names(&choose_devices(&machine, &config(&[])).unwrap()), ["eth0", "eth1"]);
        assert_eq!(names(&choose_devices(&machine, &config(&[("NCCL_SOCKET_IFNAME", "lo")])).unwrap()), ["lo"]);
        assert_eq!(names(&choose_devices(&machine, &config(&[("NCCL_SOCKET_IFNAME", "^eth0")])).unwrap()), ["lo", "docker0", "eth1"]);
        let with_ib = [interface("ib0", "192.168.0.2"), interface("eth0", "10.0.0.2")];
        assert_eq!(names(&choose_devices(&with_ib, &config(&[])).unwrap()), ["ib0"]);
        let err = choose_devices(&machine, &config(&[("NCCL_SOCKET_IFNAME", "=rail9")])).unwrap_err();
        assert!(err.contains("rail9") && err.contains("eth1"), "{err}");
    }
}
