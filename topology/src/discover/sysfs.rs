//! The sysfs files NCCL reads for a PCI device, and the PCI chain from a device's sysfs path
//! (the fallback when hwloc does not see the device).

use crate::xml::XmlNode;

/// The trimmed contents of `dir/file`, if readable and not empty.
pub(crate) fn read(dir: &str, file: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("{dir}/{file}")).ok()?;
    let text = text.trim_end_matches('\n').to_string();
    (!text.is_empty()).then_some(text)
}

/// Whether `name` is a PCI address `dddd:bb:dd.f`.
pub(crate) fn is_bdf(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.' && name.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// Sets the attributes NCCL reads from `/sys/bus/pci/devices/<bdf>`: class (or `class` when
/// unreadable), ids, and the link's speed and width (the slower and narrower of the device and its port).
pub(crate) fn fill_pci(node: &mut XmlNode, bdf: &str, class: &str) {
    let dir = format!("/sys/bus/pci/devices/{bdf}");
    node.set("class", read(&dir, "class").unwrap_or_else(|| class.to_string()));
    for key in ["vendor", "device", "subsystem_vendor", "subsystem_device"] {
        if let Some(v) = read(&dir, key) {
            node.set(key, v);
        }
    }
    let speed = |file: &str| read(&dir, file).map(|s| (s.split_whitespace().next().and_then(|v| v.parse::<f32>().ok()).unwrap_or(f32::MAX), s));
    let device_speed = speed("max_link_speed");
    let port_speed = speed("../max_link_speed");
    let link_speed = match (device_speed, port_speed) {
        (Some(d), Some(p)) => if p.0 < d.0 { p.1 } else { d.1 },
        (Some(d), None) => d.1,
        (None, Some(p)) => p.1,
        (None, None) => String::new(),
    };
    node.set("link_speed", link_speed);
    let width = |file: &str| read(&dir, file).and_then(|w| w.trim().parse::<i64>().ok()).unwrap_or(0);
    node.set("link_width", width("max_link_width").min(width("../max_link_width")).to_string());
}

/// The PCI device of a Net's sysfs path (its last PCI address component), if the path is a PCI device.
pub(crate) fn pci_device_of_path(path: &str) -> Option<String> {
    let real = std::fs::canonicalize(path).ok()?;
    let subsystem = std::fs::canonicalize(real.join("subsystem")).ok()?;
    if subsystem.file_name()? != "pci" {
        return None;
    }
    real.file_name()?.to_str().filter(|n| is_bdf(n)).map(str::to_string)
}

/// The bridges above `bdf` (top first) and its NUMA node, from the sysfs path, as NCCL walks it.
pub(crate) fn pci_chain(bdf: &str) -> Option<(Vec<String>, i32)> {
    let real = std::fs::canonicalize(format!("/sys/bus/pci/devices/{bdf}")).ok()?;
    let mut chain: Vec<String> = real.iter().filter_map(|c| c.to_str()).filter(|c| is_bdf(c)).map(str::to_string).collect();
    chain.pop();
    let top = chain.first().map_or(bdf, String::as_str);
    let numa = read(&format!("/sys/bus/pci/devices/{top}"), "numa_node").and_then(|n| n.trim().parse().ok()).unwrap_or(-1);
    Some((chain, numa))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(is_bdf("0000:19:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:19:00"));
    }

    #[test]
    fn this_machines_pci_devices_have_chains() {
        let Ok(entries) = std::fs::read_dir("/sys/bus/pci/devices") else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().into_string().unwrap();
            let (chain, _) = pci_chain(&name).expect("every listed device resolves");
            assert!(chain.iter().all(|b| is_bdf(b) && b != &name), "{name}: {chain:?}");
            let mut node = XmlNode::new("pci");
            fill_pci(&mut node, &name, "0x000000");
            assert!(node.attr("class").unwrap().starts_with("0x"), "{name}");
        }
    }
}
