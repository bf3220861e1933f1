//! NCCL's topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`): a tree of elements with
//! string attributes, kept in order so that what is loaded dumps back unchanged.
//!
//! The format, as NCCL 2.28 writes and reads it:
//!
//! ```text
//! <system version="1">
//!   <cpu numaid="0" host_hash="0x..." affinity="ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
//!     <pci busid="0000:17:00.0" class="0x060400" vendor="0x1000" device="0xc030" ... link_speed="32.0 GT/s PCIe" link_width="16">
//!       <pci busid="0000:19:00.0" class="0x030200" ...>
//!         <gpu dev="0" sm="90" rank="0" gdr="1">
//!           <nvlink target="0000:a7:00.0" count="18" tclass="0x068000"/>
//!         </gpu>
//!       </pci>
//!       <pci busid="0000:1a:00.0" class="0x020700" ...>
//!         <nic><net name="mlx5_0" dev="0" speed="400000" port="1" latency="0" guid="0x..." maxconn="131072" gdr="1"/></nic>
//!       </pci>
//!     </pci>
//!     <nic><net name="lo" dev="1" .../></nic>
//!   </cpu>
//! </system>
//! ```
//!
//! What NCCL accepts is accepted: elements it does not know (at any level) are skipped, as
//! NCCL skips them; `<system>` must carry `version="1"`; comments are ignored. The dump is
//! byte-for-byte NCCL's layout (two spaces per level, `<a/>` for an empty element).

use crate::error::{Error, Result};

/// The only topology XML version NCCL reads.
pub const VERSION: &str = "1";

/// One element: its name, attributes in order, and child elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XmlNode {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<XmlNode>,
}

/// Which children each element keeps (NCCL's parser handlers); others are skipped.
fn known_children(element: &str) -> &'static [&'static str] {
    match element {
        "system" => &["cpu"],
        "cpu" => &["pci", "nic"],
        "pci" => &["pci", "gpu", "nic", "pcilink"],
        "gpu" => &["nvlink", "c2c"],
        "nic" => &["net"],
        _ => &[],
    }
}

impl XmlNode {
    /// An element with no attributes or children.
    pub fn new(name: &str) -> XmlNode {
        XmlNode { name: name.into(), ..XmlNode::default() }
    }

    /// The value of `key`, if set.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets `key` (in place if present, else appended, so the order is the order of first setting).
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut XmlNode {
        let value = value.into();
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.attrs.push((key.into(), value)),
        }
        self
    }

    /// Sets `key` only when absent (NCCL's `xmlInitAttr*`: values from a loaded file win).
    pub fn set_default(&mut self, key: &str, value: impl Into<String>) -> &mut XmlNode {
        if self.attr(key).is_none() {
            self.attrs.push((key.into(), value.into()));
        }
        self
    }

    /// Removes `key`.
    pub fn unset(&mut self, key: &str) {
        self.attrs.retain(|(k, _)| k != key);
    }

    /// `key` as an integer (decimal, or hex with 0x), naming the element and attribute when it is missing or malformed.
    pub fn int(&self, key: &str) -> Result<i64> {
        let value = self.attr(key).ok_or_else(|| Error::attribute(&self.name, key, "missing"))?;
        parse_int(value).ok_or_else(|| Error::attribute(&self.name, key, format!("{value:?} is not an integer")))
    }

    /// `key` as an integer, or `default` when absent (a malformed value is still an error).
    pub fn int_or(&self, key: &str, default: i64) -> Result<i64> {
        if self.attr(key).is_some_and(|v| !v.is_empty()) {
            self.int(key)
        } else {
            Ok(default)
        }
    }

    /// `key` as a number, or `default` when absent.
    pub fn float_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.attr(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| Error::attribute(&self.name, key, format!("{v:?} is not a number"))),
        }
    }

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&XmlNode> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The first child named `name`, added if there is none.
    pub fn child_mut_or_add(&mut self, name: &str) -> &mut XmlNode {
        match self.children.iter().position(|c| c.name == name) {
            Some(i) => &mut self.children[i],
            None => {
                self.children.push(XmlNode::new(name));
                self.children.last_mut().expect("just pushed")
            }
        }
    }

    /// Every element of the subtree, depth first, this one included.
    pub fn descendants(&self) -> Vec<&XmlNode> {
        let mut out = vec![self];
        let mut i = 0;
        while i < out.len() {
            let node = out[i];
            out.extend(node.children.iter());
            i += 1;
        }
        out
    }

    /// Parses NCCL's topology XML. `origin` (a file name) goes into errors.
    pub fn parse(text: &str, origin: Option<&str>) -> Result<XmlNode> {
        let error = |reason: String| Error::Xml { origin: origin.map(str::to_string), reason };
        let document = roxmltree::Document::parse(text).map_err(|e| error(e.to_string()))?;
        let root = document.root_element();
        if root.tag_name().name() != "system" {
            return Err(error(format!("the top element is <{}>, expected <system version=\"{VERSION}\">", root.tag_name().name())));
        }
        match root.attribute("version") {
            Some(VERSION) => {}
            Some(v) => return Err(error(format!("<system version=\"{v}\">: only version {VERSION} is understood (NCCL's)"))),
            None => return Err(error("<system> has no version attribute".into())),
        }
        Ok(convert(root))
    }

    /// Reads and parses `path`.
    pub fn load(path: &std::path::Path) -> Result<XmlNode> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { what: "reading topology file", path: path.display().to_string(), source })?;
        XmlNode::parse(&text, Some(&path.display().to_string()))
    }

    /// The XML text, laid out as NCCL's dump.
    pub fn to_xml(&self) -> String {
        let mut out = String::new();
        self.write(0, &mut out);
        out
    }

    /// Writes [`XmlNode::to_xml`] to `path`.
    pub fn dump(&self, path: &std::path::Path) -> Result<()> {
        std::fs::write(path, self.to_xml()).map_err(|source| Error::Io { what: "writing topology file", path: path.display().to_string(), source })
    }

    fn write(&self, indent: usize, out: &mut String) {
        out.extend(std::iter::repeat_n(' ', indent));
        out.push('<');
        out.push_str(&self.name);
        for (key, value) in &self.attrs {
            out.push(' ');
            out.push_str(key);
            out.push_str("=\"");
            escape(value, out);
            out.push('"');
        }
        if self.children.is_empty() {
            out.push_str("/>\n");
            return;
        }
        out.push_str(">\n");
        for child in &self.children {
            child.write(indent + 2, out);
        }
        out.extend(std::iter::repeat_n(' ', indent));
        out.push_str("</");
        out.push_str(&self.name);
        out.push_str(">\n");
    }
}

fn convert(element: roxmltree::Node) -> XmlNode {
    let name = element.tag_name().name().to_string();
    let attrs = element.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect();
    let known = known_children(&name);
    let children = element
        .children()
        .filter(|c| c.is_element())
        .filter(|c| {
            let keep = known.contains(&c.tag_name().name());
            if !keep {
                tracing::info!(target: "oxccl::graph", "topology XML: ignoring <{}> inside <{name}>", c.tag_name().name());
            }
            keep
        })
        .map(convert)
        .collect();
    XmlNode { name, attrs, children }
}

fn escape(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// An integer as NCCL writes them: decimal (maybe negative) or 0x-prefixed hex.
pub fn parse_int(value: &str) -> Option<i64> {
    let v = value.trim();
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|u| u as i64);
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL_DUMP: &str = include_str!("../tests/fixtures/nccl-2.28-h200x1.xml");

    #[test]
    fn nccls_dump_loads_and_dumps_back_unchanged() {
        let system = XmlNode::parse(NCCL_DUMP, None).unwrap();
        assert_eq!(system.to_xml(), NCCL_DUMP);
        let cpu = system.child("cpu").unwrap();
        assert_eq!(cpu.attr("vendor"), Some("GenuineIntel"));
        assert_eq!(cpu.child("pci").unwrap().child("gpu").unwrap().int("sm").unwrap(), 90);
        assert_eq!(cpu.child("nic").unwrap().child("net").unwrap().attr("name"), Some("lo"));
    }

    #[test]
    fn unknown_elements_are_skipped_and_comments_ignored() {
        let text = "<system version=\"1\"><!-- a comment --><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"><fancy/><gpu dev=\"0\"/></pci><other/></cpu></system>";
        let system = XmlNode::parse(text, None).unwrap();
        let cpu = system.child("cpu").unwrap();
        assert_eq!(cpu.children.len(), 1);
        assert_eq!(cpu.children[0].children.len(), 1);
        assert_eq!(cpu.children[0].children[0].name, "gpu");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = XmlNode::parse("<system version=\"2\"/>", Some("t.xml")).unwrap_err().to_string();
        assert!(err.contains("t.xml") && err.contains("version"), "{err}");
        let err = XmlNode::parse("<graphs version=\"1\"/>", None).unwrap_err().to_string();
        assert!(err.contains("<graphs>"), "{err}");
        let err = XmlNode::parse("<system version=\"1\"><cpu>", None).unwrap_err().to_string();
        assert!(err.contains("topology XML"), "{err}");
        let gpu = XmlNode { name: "gpu".into(), attrs: vec![("sm".into(), "ninety".into())], children: vec![] };
        let err = gpu.int("sm").unwrap_err().to_string();
        assert!(err.contains("<gpu> sm") && err.contains("ninety"), "{err}");
        assert!(gpu.int("dev").unwrap_err().to_string().contains("missing"));
    }

    #[test]
    fn values_are_escaped() {
        let mut node = XmlNode::new("net");
        node.set("name", "a\"<b>&");
        let back = XmlNode::parse(&format!("<system version=\"1\"><cpu><nic>{}</nic></cpu></system>", node.to_xml()), None).unwrap();
        assert_eq!(back.child("cpu").unwrap().child("nic").unwrap().child("net").unwrap().attr("name"), Some("a\"<b>&"));
    }
}
