//! The 128-byte unique id that tells ranks where the root is and proves they belong.
//!
//! Layout (fixed; all multi-byte integers little-endian except the port):
//!
//! | bytes   | field                                                  |
//! |---------|--------------------------------------------------------|
//! | 0..4    | magic `OXID`                                           |
//! | 4..6    | protocol version ([`PROTOCOL_VERSION`])                |
//! | 6       | address family: 4 or 6                                 |
//! | 7       | flags: bit 0 [`UniqueId::confirmed`], other bits 0       |
//! | 8..10   | root port, network byte order                          |
//! | 10..26  | root IP address (IPv4 in the first 4 bytes, rest 0)    |
//! | 26..32  | reserved, 0                                            |
//! | 32..64  | secret: 32 random bytes every rank must present        |
//! | 64..128 | reserved, 0                                            |
//!
//! The id is plain bytes: send it by MPI broadcast, a file or an environment variable
//! (`to_hex`). Decoding checks every field, reserved bytes included.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{Error, Result};

/// Size of an id, the size of `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;
/// The first four bytes of every id.
pub const MAGIC: [u8; 4] = *b"OXID";
/// Version of the bootstrap protocol; peers with another version are refused.
pub const PROTOCOL_VERSION: u16 = 1;
/// Size of the secret.
pub const SECRET_BYTES: usize = 32;

/// The secret every rank of a job presents to the root and to each other.
pub type Secret = [u8; SECRET_BYTES];

/// A job's unique id: the root's address and the job's secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    root: SocketAddr,
    secret: Secret,
    confirmed: bool,
}

/// Bit of byte 7: [`UniqueId::confirmed`].
const FLAG_CONFIRMED: u8 = 1;

impl UniqueId {
    /// An id for a root at `root` with the given secret. The root is not started here: see
    /// [`crate::Bootstrap::create_id`] for an id whose root this process serves.
    pub fn new(root: SocketAddr, secret: Secret) -> UniqueId {
        UniqueId { root, secret, confirmed: false }
    }

    /// An id with a fresh random secret.
    pub fn with_random_secret(root: SocketAddr) -> Result<UniqueId> {
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut secret).map_err(|e| Error::io("reading random bytes for the secret", std::io::Error::other(e.to_string())))?;
        Ok(UniqueId::new(root, secret))
    }

    /// The same id, marked so that every rank joining through it confirms the new
    /// communicator with an agreement before using it: the join then succeeds on every
    /// surviving rank or on none, also when a rank dies during it (grow ids, from
    /// `Communicator::grow_id`). Every rank reads the mark from the id, so all do the same.
    pub fn with_confirmation(self) -> UniqueId {
        UniqueId { confirmed: true, ..self }
    }

    /// Whether the join through this id ends with a confirming agreement
    /// ([`UniqueId::with_confirmation`]).
    pub fn confirmed(&self) -> bool {
        self.confirmed
    }

    /// An id whose secret is derived from strings every rank of a job knows (the launcher's
    /// job id, the root address). It keeps separate jobs apart; it is not a secret against
    /// a hostile peer that can read the job's environment.
    pub fn derived(root: SocketAddr, job_parts: &[&str]) -> UniqueId {
        let mut secret = [0u8; SECRET_BYTES];
        for (lane, chunk) in secret.chunks_mut(8).enumerate() {
            // FNV-1a, seeded per lane: stable across builds and Rust versions.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (lane as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for byte in job_parts.join("\u{1f}").bytes().chain(root.to_string().bytes()) {
                h = (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            }
            chunk.copy_from_slice(&h.to_le_bytes());
        }
        UniqueId::new(root, secret)
    }

    /// Where the root listens.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// The job's secret.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// The 128-byte wire form.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[8..10].copy_from_slice(&self.root.port().to_be_bytes());
        match self.root.ip() {
            IpAddr::V4(v4) => {
                b[6] = 4;
                b[10..14].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b[6] = 6;
                b[10..26].copy_from_slice(&v6.octets());
            }
        }
        b[7] = if self.confirmed { FLAG_CONFIRMED } else { 0 };
        b[32..64].copy_from_slice(&self.secret);
        b
    }

    /// Decodes the wire form, checking magic, version, address and reserved bytes.
    pub fn from_bytes(b: &[u8]) -> Result<UniqueId> {
        let bad = |reason: String| Error::wire("unique id", reason);
        if b.len() != UNIQUE_ID_BYTES {
            return Err(bad(format!("{} bytes, expected {UNIQUE_ID_BYTES}", b.len())));
        }
        if b[0..4] != MAGIC {
            return Err(bad(format!("magic {:02x?} is not {:02x?} (not an oxccl id?)", &b[0..4], MAGIC)));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != PROTOCOL_VERSION {
            return Err(bad(format!("protocol version {version}, this build speaks {PROTOCOL_VERSION}")));
        }
        if b[7] & !FLAG_CONFIRMED != 0 {
            return Err(bad(format!("flags byte {:#04x} has unknown bits", b[7])));
        }
        let reserved_ok = b[26..32].iter().all(|&x| x == 0) && b[64..].iter().all(|&x| x == 0);
        if !reserved_ok {
            return Err(bad("reserved bytes are not zero".into()));
        }
        let port = u16::from_be_bytes([b[8], b[9]]);
        if port == 0 {
            return Err(bad("root port is 0".into()));
        }
        let ip = match b[6] {
            4 if b[14..26].iter().all(|&x| x == 0) => IpAddr::V4(Ipv4Addr::new(b[10], b[11], b[12], b[13])),
            4 => return Err(bad("IPv4 address with non-zero padding".into())),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[10..26]).expect("16-byte slice"))),
            f => return Err(bad(format!("address family {f}, expected 4 or 6"))),
        };
        if ip.is_unspecified() {
            return Err(bad("root address is unspecified (0.0.0.0 / ::)".into()));
        }
        let mut secret = [0u8; SECRET_BYTES];
        secret.copy_from_slice(&b[32..64]);
        Ok(UniqueId { root: SocketAddr::new(ip, port), secret, confirmed: b[7] & FLAG_CONFIRMED != 0 })
    }

    /// 256 lowercase hex digits, for environment variables and files.
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`UniqueId::to_hex`]'s form (surrounding whitespace allowed).
    pub fn from_hex(s: &str) -> Result<UniqueId> {
        let s = s.trim();
        if s.len() != 2 * UNIQUE_ID_BYTES || !s.is_ascii() {
            return Err(Error::wire("unique id", format!("{} hex digits, expected {}", s.len(), 2 * UNIQUE_ID_BYTES)));
        }
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| Error::wire("unique id", format!("not hex at digit {}", 2 * i)))?;
        }
        UniqueId::from_bytes(&bytes)
    }
}

impl fmt::Debug for UniqueId {
    // The secret stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId").field("root", &self.root).field("confirmed", &self.confirmed).finish_non_exhaustive()
    }
}

/// Compares secrets in time independent of where they differ.
pub(crate) fn secrets_match(a: &Secret, b: &Secret) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips_v4_and_v6() {
        for root in ["127.0.0.1:29500", "[::1]:1", "[fd00::2]:65535"] {
            let id = UniqueId::with_random_secret(root.parse().unwrap()).unwrap();
            assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
            assert_eq!(UniqueId::from_hex(&id.to_hex()).unwrap(), id);
        }
    }

    #[test]
    fn layout_is_fixed() {
        let id = UniqueId::new("10.1.2.3:258".parse().unwrap(), [7; 32]);
        let b = id.to_bytes();
        assert_eq!(&b[0..4], b"OXID");
        assert_eq!(&b[4..6], &[1, 0]);
        assert_eq!(b[6], 4);
        assert_eq!(&b[8..10], &[1, 2]);
        assert_eq!(&b[10..14], &[10, 1, 2, 3]);
        assert!(b[32..64].iter().all(|&x| x == 7));
    }

    #[test]
    fn rejects_bad_fields_with_reasons() {
        let good = UniqueId::new("127.0.0.1:5000".parse().unwrap(), [1; 32]).to_bytes();
        let cases: [(usize, u8, &str); 5] =
            [(0, b'X', "magic"), (4, 9, "version"), (6, 5, "family"), (100, 1, "reserved"), (9, 0, "")];
        for (at, value, word) in cases {
            let mut b = good;
            b[at] = value;
            if at == 9 {
                b[8] = 0; // port 0
            }
            let err = UniqueId::from_bytes(&b).unwrap_err().to_string();
            assert!(err.contains(word), "{err}");
        }
        assert!(UniqueId::from_bytes(&good[..64]).is_err());
        let mut b = good;
        b[7] = 2;
        assert!(UniqueId::from_bytes(&b).unwrap_err().to_string().contains("flags byte 0x02"));
        assert!(UniqueId::from_hex("zz").is_err());
    }

    #[test]
    fn the_confirmation_mark_round_trips() {
        let id = UniqueId::new("127.0.0.1:5000".parse().unwrap(), [1; 32]);
        assert!(!id.confirmed());
        let marked = id.with_confirmation();
        assert_eq!(marked.to_bytes()[7], 1);
        assert_eq!(id.to_bytes()[7], 0);
        let decoded = UniqueId::from_hex(&marked.to_hex()).unwrap();
        assert!(decoded.confirmed());
        assert_eq!(decoded, marked);
        assert_ne!(decoded, id);
    }

    #[test]
    fn derived_secrets_separate_jobs() {
        let root = "127.0.0.1:1000".parse().unwrap();
        assert_eq!(UniqueId::derived(root, &["job1"]), UniqueId::derived(root, &["job1"]));
        assert_ne!(UniqueId::derived(root, &["job1"]).secret(), UniqueId::derived(root, &["job2"]).secret());
    }

    #[test]
    fn debug_hides_the_secret() {
        let id = UniqueId::new("127.0.0.1:5000".parse().unwrap(), [0xab; 32]);
        assert!(!format!("{id:?}").contains("171"));
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = UniqueId::from_bytes(&bytes);
        }

        #[test]
        fn decode_accepts_exactly_what_encode_produces(ip in any::<[u8; 4]>(), port in 1u16.., secret in any::<[u8; 32]>()) {
            let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port);
            let id = UniqueId::new(addr, secret);
            match UniqueId::from_bytes(&id.to_bytes()) {
                Ok(decoded) => prop_assert_eq!(decoded, id),
                Err(_) => prop_assert!(addr.ip().is_unspecified()),
            }
        }
    }
}
