//! Choosing the network interface for bootstrap (and socket) traffic.
//!
//! `NCCL_SOCKET_IFNAME` uses NCCL's syntax: a comma list of name prefixes (`eth,ib`); a
//! leading `^` turns it into a list to exclude (`^docker,lo`); a leading `=` makes the names
//! exact (`=eth0`, `^=eth0`). `NCCL_SOCKET_FAMILY` (AF_INET, AF_INET6) restricts addresses.
//! Without a filter, the default is an UP, non-loopback interface that is not a container
//! bridge (InfiniBand `ib*` first), and loopback when there is no other. A rank joining a
//! root prefers an interface on the root's subnet (loopback for a loopback root), as NCCL
//! does, so that a job whose root is on 127.0.0.1 never leaves the machine.

use std::net::IpAddr;
use std::str::FromStr;

use crate::error::{Error, Result};

/// One address of one interface, as `getifaddrs` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addr: IpAddr,
    /// Prefix length of the netmask, when known.
    pub prefix_len: Option<u8>,
    pub up: bool,
    pub loopback: bool,
}

/// `NCCL_SOCKET_FAMILY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFamily {
    V4,
    V6,
}

impl FromStr for AddressFamily {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "AF_INET" | "INET" | "IPV4" | "4" => Ok(AddressFamily::V4),
            "AF_INET6" | "INET6" | "IPV6" | "6" => Ok(AddressFamily::V6),
            _ => Err("expected AF_INET or AF_INET6".into()),
        }
    }
}

impl AddressFamily {
    fn matches(self, addr: &IpAddr) -> bool {
        matches!((self, addr), (AddressFamily::V4, IpAddr::V4(_)) | (AddressFamily::V6, IpAddr::V6(_)))
    }
}

/// `NCCL_SOCKET_IFNAME`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceFilter {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl FromStr for InterfaceFilter {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (exclude, rest) = s.strip_prefix('^').map_or((false, s), |r| (true, r));
        let (exact, rest) = rest.strip_prefix('=').map_or((false, rest), |r| (true, r));
        let names: Vec<String> = rest.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect();
        if names.is_empty() {
            return Err("expected a comma list of interface names or prefixes".into());
        }
        Ok(InterfaceFilter { exclude, exact, names })
    }
}

impl InterfaceFilter {
    /// Whether the interface `name` passes the filter.
    pub fn allows(&self, name: &str) -> bool {
        let listed = self.names.iter().any(|n| if self.exact { name == n } else { name.starts_with(n.as_str()) });
        listed != self.exclude
    }
}

/// Interface names the default choice passes over (container and VM bridges).
const DEFAULT_SKIPPED_PREFIXES: &[&str] = &["docker", "virbr", "veth", "br-", "cni", "flannel"];

/// Picks the address to listen on.
///
/// `toward` is the root's address when this rank joins an existing root: an interface on
/// the same subnet wins (loopback for a loopback root). `local_job` says that every rank
/// runs on this machine (threads, or processes spawned here): loopback is then the default.
pub fn select(
    interfaces: &[Interface],
    filter: Option<&InterfaceFilter>,
    family: Option<AddressFamily>,
    toward: Option<IpAddr>,
    local_job: bool,
) -> Result<IpAddr> {
    let usable = |i: &&Interface| {
        i.up && family.is_none_or(|f| f.matches(&i.addr)) && !is_ipv6_link_local(&i.addr)
    };
    let candidates: Vec<&Interface> = interfaces.iter().filter(usable).collect();

    if let Some(filter) = filter {
        let allowed: Vec<&Interface> = candidates.iter().copied().filter(|i| filter.allows(&i.name)).collect();
        return pick_toward(&allowed, toward)
            .or_else(|| allowed.first().map(|i| i.addr))
            .ok_or_else(|| Error::Config {
                name: "NCCL_SOCKET_IFNAME".into(),
                value: format!("{filter:?}"),
                reason: format!("no usable interface matches (have: {})", names(interfaces)),
            });
    }
    if let Some(addr) = pick_toward(&candidates, toward) {
        return Ok(addr);
    }
    let loopback = candidates.iter().find(|i| i.loopback).map(|i| i.addr);
    if local_job {
        if let Some(addr) = loopback {
            return Ok(addr);
        }
    }
    let preferred = candidates
        .iter()
        .filter(|i| !i.loopback && !DEFAULT_SKIPPED_PREFIXES.iter().any(|p| i.name.starts_with(p)))
        .min_by_key(|i| (!i.name.starts_with("ib"), i.addr.is_ipv6()));
    preferred
        .map(|i| i.addr)
        .or(loopback)
        .ok_or_else(|| Error::NoLauncher(format!("no usable network interface (have: {})", names(interfaces))))
}

/// Lists this machine's interface addresses.
pub fn list() -> Result<Vec<Interface>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::io("getifaddrs", e.into()))?;
    Ok(addrs
        .filter_map(|ifa| {
            let storage = ifa.address?;
            let addr: IpAddr = if let Some(v4) = storage.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else {
                IpAddr::V6(storage.as_sockaddr_in6()?.ip())
            };
            let prefix_len = ifa.netmask.and_then(|m| {
                m.as_sockaddr_in()
                    .map(|v4| u32::from(v4.ip()).count_ones() as u8)
                    .or_else(|| m.as_sockaddr_in6().map(|v6| u128::from(v6.ip()).count_ones() as u8))
            });
            let flags = ifa.flags;
            Some(Interface {
                name: ifa.interface_name,
                addr,
                prefix_len,
                up: flags.contains(nix::net::if_::InterfaceFlags::IFF_UP),
                loopback: flags.contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK),
            })
        })
        .collect())
}

fn pick_toward(candidates: &[&Interface], toward: Option<IpAddr>) -> Option<IpAddr> {
    let root = toward?;
    if root.is_loopback() {
        return candidates.iter().find(|i| i.loopback && i.addr.is_ipv4() == root.is_ipv4()).map(|i| i.addr);
    }
    candidates.iter().find(|i| same_subnet(i, &root)).map(|i| i.addr)
}

fn same_subnet(iface: &Interface, other: &IpAddr) -> bool {
    let Some(len) = iface.prefix_len else { return false };
    match (iface.addr, other) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
            u32::from(a) & mask == u32::from(*b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0);
            u128::from(a) & mask == u128::from(*b) & mask
        }
        _ => false,
    }
}

fn is_ipv6_link_local(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

fn names(interfaces: &[Interface]) -> String {
    let mut names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    names.dedup();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, addr: &str, prefix: u8) -> Interface {
        let addr: IpAddr = addr.parse().unwrap();
        Interface { name: name.into(), addr, prefix_len: Some(prefix), up: true, loopback: addr.is_loopback() }
    }

    fn machine() -> Vec<Interface> {
        vec![
            iface("lo", "127.0.0.1", 8),
            iface("lo", "::1", 128),
            iface("docker0", "172.17.0.1", 16),
            iface("eth0", "192.0.2.2", 24),
            iface("eth0", "fd00::2", 64),
            iface("eth0", "fe80::1", 64),
            iface("ib0", "10.1.0.5", 16),
        ]
    }

    fn pick(filter: &str, family: Option<AddressFamily>) -> Result<IpAddr> {
        let f: Option<InterfaceFilter> = if filter.is_empty() { None } else { Some(filter.parse().unwrap()) };
        select(&machine(), f.as_ref(), family, None, false)
    }

    #[test]
    fn filter_syntax() {
        let f: InterfaceFilter = "eth,ib".parse().unwrap();
        assert!(f.allows("eth0") && f.allows("ib1") && !f.allows("lo"));
        let f: InterfaceFilter = "^docker,lo".parse().unwrap();
        assert!(f.allows("eth0") && !f.allows("docker0") && !f.allows("lo"));
        let f: InterfaceFilter = "=eth0".parse().unwrap();
        assert!(f.allows("eth0") && !f.allows("eth01"));
        let f: InterfaceFilter = "^=eth0".parse().unwrap();
        assert!(!f.allows("eth0") && f.allows("eth01"));
        assert!("".parse::<InterfaceFilter>().is_err());
        assert!("^".parse::<InterfaceFilter>().is_err());
    }

    #[test]
    fn default_prefers_infiniband_then_non_loopback() {
        assert_eq!(pick("", None).unwrap(), "10.1.0.5".parse::<IpAddr>().unwrap());
        let no_ib: Vec<Interface> = machine().into_iter().filter(|i| i.name != "ib0").collect();
        assert_eq!(select(&no_ib, None, None, None, false).unwrap(), "192.0.2.2".parse::<IpAddr>().unwrap());
        let only_lo: Vec<Interface> = machine().into_iter().filter(|i| i.loopback).collect();
        assert_eq!(select(&only_lo, None, None, None, false).unwrap(), "127.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn local_jobs_and_loopback_roots_stay_on_loopback() {
        assert!(select(&machine(), None, None, None, true).unwrap().is_loopback());
        let root: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(select(&machine(), None, None, Some(root), false).unwrap().is_loopback());
    }

    #[test]
    fn joining_rank_prefers_the_roots_subnet() {
        let root: IpAddr = "192.0.2.77".parse().unwrap();
        assert_eq!(select(&machine(), None, None, Some(root), false).unwrap(), "192.0.2.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn family_and_exclusion() {
        assert_eq!(pick("eth", Some(AddressFamily::V6)).unwrap(), "fd00::2".parse::<IpAddr>().unwrap());
        assert_eq!(pick("lo", Some(AddressFamily::V6)).unwrap(), "::1".parse::<IpAddr>().unwrap());
        assert_eq!(pick("^ib,docker,lo", Some(AddressFamily::V4)).unwrap(), "192.0.2.2".parse::<IpAddr>().unwrap());
        let err = pick("wlan", None).unwrap_err().to_string();
        assert!(err.contains("NCCL_SOCKET_IFNAME") && err.contains("eth0"), "{err}");
    }

    #[test]
    fn this_machine_has_loopback() {
        let list = list().unwrap();
        assert!(list.iter().any(|i| i.loopback && i.addr.is_ipv4()), "{list:?}");
    }
}
