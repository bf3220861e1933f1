//! The bootstrap's wire format: length-prefixed frames and the messages inside them.
//!
//! A frame is a little-endian `u32` body length followed by the body; the length is checked
//! against a limit *before* anything is allocated. A body starts with a kind byte. Every
//! decoder is a pure function over bytes (fuzzed by `fuzz/fuzz_targets/wire.rs` and
//! property-tested below): garbage gives an error, never a panic.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{Error, Result};
use crate::id::{Secret, SECRET_BYTES};

/// First bytes of a hello, so that a stray client (an HTTP probe, say) is told apart from a
/// rank of another version.
pub const HELLO_MAGIC: [u8; 4] = *b"OXBS";
/// Largest handshake frame: hellos are small, so anything bigger is refused at once.
pub const MAX_HANDSHAKE_FRAME: usize = 4096;

/// Who a connecting rank says it is. Sent first on every connection, to the root and to
/// peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub magic: [u8; 4],
    pub version: u16,
    pub secret: Secret,
    pub rank: u32,
    pub nranks: u32,
    /// The address this rank listens on for its peers.
    pub listen: SocketAddr,
}

/// Everything that travels on bootstrap connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A rank introduces itself (to the root, or to a peer).
    Hello(Hello),
    /// Root → rank: every rank's listen address, indexed by rank.
    Table(Vec<SocketAddr>),
    /// The receiver turned the sender away.
    Refuse { reason: String },
    /// The job is failing: the named ranks did not join or died.
    Abort { reason: String, failed: Vec<u32> },
    /// Control data between ranks, addressed to a communicator and a tag.
    Data { comm: u64, tag: u64, payload: Vec<u8> },
    /// The sender leaves the job normally: its connection ending is not a failure.
    Bye,
}

const KIND_HELLO: u8 = 1;
const KIND_TABLE: u8 = 2;
const KIND_REFUSE: u8 = 3;
const KIND_ABORT: u8 = 4;
const KIND_DATA: u8 = 5;
const KIND_BYE: u8 = 6;

impl Message {
    /// The frame body (without the length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Message::Hello(h) => {
                out.push(KIND_HELLO);
                out.extend_from_slice(&h.magic);
                out.extend_from_slice(&h.version.to_le_bytes());
                out.extend_from_slice(&h.secret);
                out.extend_from_slice(&h.rank.to_le_bytes());
                out.extend_from_slice(&h.nranks.to_le_bytes());
                put_addr(&mut out, &h.listen);
            }
            Message::Table(addrs) => {
                out.push(KIND_TABLE);
                out.extend_from_slice(&(addrs.len() as u32).to_le_bytes());
                addrs.iter().for_each(|a| put_addr(&mut out, a));
            }
            Message::Refuse { reason } => {
                out.push(KIND_REFUSE);
                put_str(&mut out, reason);
            }
            Message::Abort { reason, failed } => {
                out.push(KIND_ABORT);
                put_str(&mut out, reason);
                out.extend_from_slice(&(failed.len() as u32).to_le_bytes());
                failed.iter().for_each(|r| out.extend_from_slice(&r.to_le_bytes()));
            }
            Message::Data { comm, tag, payload } => {
                out.reserve(17 + payload.len());
                out.push(KIND_DATA);
                out.extend_from_slice(&comm.to_le_bytes());
                out.extend_from_slice(&tag.to_le_bytes());
                out.extend_from_slice(payload);
            }
            Message::Bye => out.push(KIND_BYE),
        }
        out
    }

    /// Decodes a frame body. Trailing bytes are an error.
    pub fn decode(body: &[u8]) -> Result<Message> {
        let mut r = Reader { buf: body };
        let message = match r.u8()? {
            KIND_HELLO => Message::Hello(Hello {
                magic: r.array::<4>()?,
                version: u16::from_le_bytes(r.array::<2>()?),
                secret: r.array::<SECRET_BYTES>()?,
                rank: r.u32()?,
                nranks: r.u32()?,
                listen: r.addr()?,
            }),
            KIND_TABLE => {
                let n = r.u32()? as usize;
                // Each address takes 19 bytes: refuse counts the body cannot hold before
                // allocating for them.
                if n > r.buf.len() / ADDR_BYTES {
                    return Err(Error::wire("table", format!("{n} entries in {} bytes", r.buf.len())));
                }
                Message::Table((0..n).map(|_| r.addr()).collect::<Result<_>>()?)
            }
            KIND_REFUSE => Message::Refuse { reason: r.string()? },
            KIND_ABORT => {
                let reason = r.string()?;
                let n = r.u32()? as usize;
                if n > r.buf.len() / 4 {
                    return Err(Error::wire("abort notice", format!("{n} ranks in {} bytes", r.buf.len())));
                }
                Message::Abort { reason, failed: (0..n).map(|_| r.u32()).collect::<Result<_>>()? }
            }
            KIND_DATA => Message::Data { comm: r.u64()?, tag: r.u64()?, payload: std::mem::take(&mut r.buf).to_vec() },
            KIND_BYE => Message::Bye,
            kind => return Err(Error::wire("frame", format!("unknown message kind {kind}"))),
        };
        if !r.buf.is_empty() {
            return Err(Error::wire("frame", format!("{} trailing bytes", r.buf.len())));
        }
        Ok(message)
    }
}

/// Writes one message as a frame.
pub fn write_message(w: &mut impl Write, message: &Message) -> std::io::Result<()> {
    let body = message.encode();
    let len = u32::try_from(body.len()).map_err(|_| std::io::Error::other("bootstrap frame over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)
}

/// Reads one frame body of at most `max_len` bytes. A longer length is refused before any
/// allocation; a connection that ends inside a frame is a truncated frame.
pub fn read_frame(r: &mut impl Read, max_len: usize) -> Result<Vec<u8>> {
    let mut len = [0u8; 4];
    // A connection that ends between frames was closed, not cut inside a message.
    let first = loop {
        match r.read(&mut len[..1]) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e, "frame length")),
        }
    };
    if first == 0 {
        return Err(Error::wire("frame", CLOSED_BETWEEN_FRAMES));
    }
    read_exact(r, &mut len[1..], "frame length")?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max_len {
        return Err(Error::wire("frame", format!("length {len} exceeds the limit of {max_len} bytes")));
    }
    let mut body = vec![0u8; len];
    read_exact(r, &mut body, "frame body")?;
    Ok(body)
}

/// Reads and decodes one message.
pub fn read_message(r: &mut impl Read, max_len: usize) -> Result<Message> {
    Message::decode(&read_frame(r, max_len)?)
}

/// The reason of a connection that closed between two frames: the peer went away
/// (exited, was killed, or closed the socket) without a goodbye.
pub const CLOSED_BETWEEN_FRAMES: &str = "connection closed between messages";

fn read_exact(r: &mut impl Read, buf: &mut [u8], what: &'static str) -> Result<()> {
    r.read_exact(buf).map_err(|e| read_error(e, what))
}

fn read_error(e: std::io::Error, what: &'static str) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::wire("frame", format!("connection closed inside the {what} (truncated frame)")),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error::Timeout { phase: format!("reading the {what}"), waited: Default::default() }
        }
        _ => Error::io(format!("reading the {what}"), e),
    }
}

const ADDR_BYTES: usize = 19;

fn put_addr(out: &mut Vec<u8>, addr: &SocketAddr) {
    let mut ip = [0u8; 16];
    let family = match addr.ip() {
        IpAddr::V4(v4) => {
            ip[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            ip.copy_from_slice(&v6.octets());
            6
        }
    };
    out.push(family);
    out.extend_from_slice(&addr.port().to_be_bytes());
    out.extend_from_slice(&ip);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.buf.len() < n {
            return Err(Error::wire("frame", format!("body ends early: need {n} more bytes, have {}", self.buf.len())));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String> {
        let len = u16::from_le_bytes(self.array()?) as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| Error::wire("frame", "text is not UTF-8"))
    }

    fn addr(&mut self) -> Result<SocketAddr> {
        let family = self.u8()?;
        let port = u16::from_be_bytes(self.array()?);
        let ip: [u8; 16] = self.array()?;
        let ip = match family {
            4 => IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])),
            6 => IpAddr::V6(Ipv6Addr::from(ip)),
            f => return Err(Error::wire("address", format!("family {f}, expected 4 or 6"))),
        };
        Ok(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                magic: HELLO_MAGIC,
                version: 1,
                secret: [9; 32],
                rank: 3,
                nranks: 8,
                listen: "[::1]:4000".parse().unwrap(),
            }),
            Message::Table(vec!["127.0.0.1:1".parse().unwrap(), "[fd00::2]:2".parse().unwrap()]),
            Message::Refuse { reason: "wrong secret".into() },
            Message::Abort { reason: "rank 2 did not join".into(), failed: vec![2, 5] },
            Message::Data { comm: 7, tag: u64::MAX, payload: vec![1, 2, 3] },
            Message::Data { comm: 0, tag: 0, payload: vec![] },
            Message::Bye,
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_frame() {
        for m in samples() {
            let mut wire = Vec::new();
            write_message(&mut wire, &m).unwrap();
            assert_eq!(read_message(&mut wire.as_slice(), 1 << 20).unwrap(), m);
        }
    }

    #[test]
    fn oversized_length_is_refused_before_allocation() {
        let wire = u32::MAX.to_le_bytes();
        let err = read_frame(&mut wire.as_slice(), 4096).unwrap_err().to_string();
        assert!(err.contains("exceeds the limit"), "{err}");
    }

    #[test]
    fn truncated_frames_are_named() {
        let mut wire = Vec::new();
        write_message(&mut wire, &samples()[0]).unwrap();
        for cut in [2, 10, wire.len() - 1] {
            let err = read_frame(&mut &wire[..cut], 4096).unwrap_err().to_string();
            assert!(err.contains("truncated"), "{err}");
        }
    }

    #[test]
    fn garbage_kinds_and_trailing_bytes_are_errors() {
        assert!(Message::decode(&[]).is_err());
        assert!(Message::decode(&[99]).is_err());
        let mut body = Message::Refuse { reason: "x".into() }.encode();
        body.push(0);
        assert!(Message::decode(&body).unwrap_err().to_string().contains("trailing"));
        // A table claiming a billion entries in a few bytes.
        let mut body = vec![KIND_TABLE];
        body.extend_from_slice(&1_000_000_000u32.to_le_bytes());
        assert!(Message::decode(&body).is_err());
    }

    proptest! {
        #[test]
        fn decoder_never_panics(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Message::decode(&body);
        }

        #[test]
        fn decoded_messages_reencode_identically(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(m) = Message::decode(&body) {
                prop_assert_eq!(Message::decode(&m.encode()).unwrap(), m);
            }
        }

        #[test]
        fn data_round_trips(comm in any::<u64>(), tag in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..512)) {
            let m = Message::Data { comm, tag, payload };
            prop_assert_eq!(Message::decode(&m.encode()).unwrap(), m);
        }
    }
}
