//! Every refusal of the bootstrap, each played by a hostile (or broken) peer while a
//! legitimate job completes next to it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use oxccl_bootstrap::id::PROTOCOL_VERSION;
use oxccl_bootstrap::wire::{self, Hello, Message, HELLO_MAGIC};
use oxccl_bootstrap::{AbortFlag, Bootstrap, Config, UniqueId};

fn config() -> Config {
    let mut c = Config::defaults();
    c.set("OXCCL_BOOTSTRAP_TIMEOUT_MS", "20000").unwrap();
    c.set("OXCCL_HANDSHAKE_TIMEOUT_MS", "300").unwrap();
    c
}

fn hello(id: &UniqueId, rank: u32, nranks: u32) -> Hello {
    Hello { magic: HELLO_MAGIC, version: PROTOCOL_VERSION, secret: *id.secret(), rank, nranks, listen: "127.0.0.1:9".parse().unwrap() }
}

fn frame(message: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    wire::write_message(&mut out, message).unwrap();
    out
}

/// Connects to `addr`, writes `bytes`, and returns what the other side answered before
/// closing: a refusal's reason, or "closed".
fn play(addr: SocketAddr, bytes: &[u8], then_wait: bool) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(bytes).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if !then_wait {
        return String::new();
    }
    match wire::read_message(&mut stream, 1 << 16) {
        Ok(Message::Refuse { reason }) => reason,
        Ok(other) => panic!("hostile peer got {other:?}"),
        Err(e) => {
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            format!("closed ({e})")
        }
    }
}

/// Runs a legitimate job of `n` thread-ranks while `hostile` attacks its root first.
fn job_beside(n: u32, hostile: impl FnOnce(&UniqueId) -> String + Send + 'static) -> String {
    job_beside_with(config(), n, hostile).0
}

/// [`job_beside`] with a given config; also returns how long the legitimate job took.
fn job_beside_with(config: Config, n: u32, hostile: impl FnOnce(&UniqueId) -> String + Send + 'static) -> (String, Duration) {
    let id = Bootstrap::create_local_id(&config).unwrap();
    let attack = thread::spawn(move || hostile(&id));
    // Let the attack reach the root before the job does.
    thread::sleep(Duration::from_millis(50));
    let ranks: Vec<_> = (0..n)
        .map(|rank| {
            let config = config.clone();
            thread::spawn(move || {
                let b = Bootstrap::init(&id, rank, n, &config, AbortFlag::new()).unwrap();
                let all = b.allgather(&[rank as u8]).unwrap();
                assert_eq!(all, (0..n as u8).collect::<Vec<_>>());
            })
        })
        .collect();
    let start = Instant::now();
    for r in ranks {
        r.join().expect("legitimate rank failed");
    }
    let took = start.elapsed();
    (attack.join().unwrap(), took)
}

#[test]
fn wrong_secret_is_refused() {
    let answer = job_beside(3, |id| {
        let stranger = UniqueId::with_random_secret(id.root()).unwrap();
        play(id.root(), &frame(&Message::Hello(hello(&stranger, 1, 3))), true)
    });
    assert!(answer.contains("wrong secret"), "{answer}");
}

#[test]
fn wrong_magic_and_version_are_refused() {
    let answer = job_beside(2, |id| play(id.root(), &frame(&Message::Hello(Hello { magic: *b"HTTP", ..hello(id, 0, 2) })), true));
    assert!(answer.contains("magic"), "{answer}");
    let answer = job_beside(2, |id| play(id.root(), &frame(&Message::Hello(Hello { version: 77, ..hello(id, 0, 2) })), true));
    assert!(answer.contains("version 77"), "{answer}");
}

#[test]
fn garbage_bytes_are_dropped() {
    let answer = job_beside(2, |id| play(id.root(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true));
    assert!(answer.starts_with("closed"), "{answer}");
}

#[test]
fn truncated_frame_is_dropped() {
    let answer = job_beside(2, |id| {
        let whole = frame(&Message::Hello(hello(id, 0, 2)));
        let mut stream = TcpStream::connect(id.root()).unwrap();
        stream.write_all(&whole[..whole.len() / 2]).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.read_to_end(&mut rest).map(|_| format!("closed after {} bytes", rest.len())).unwrap_or_else(|e| e.to_string())
    });
    assert_eq!(answer, "closed after 0 bytes");
}

#[test]
fn oversized_frame_is_refused_before_allocation() {
    let answer = job_beside(2, |id| {
        let mut bytes = (u32::MAX - 1).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[1; 64]);
        play(id.root(), &bytes, true)
    });
    assert!(answer.starts_with("closed"), "{answer}");
}

#[test]
fn out_of_range_rank_is_refused() {
    let answer = job_beside(3, |id| play(id.root(), &frame(&Message::Hello(hello(id, 3, 3))), true));
    assert!(answer.contains("out of range"), "{answer}");
}

#[test]
fn silent_peer_is_dropped_after_the_handshake_timeout_without_blocking_the_root() {
    let mut config = config();
    config.set("OXCCL_HANDSHAKE_TIMEOUT_MS", "3000").unwrap();
    let start = Instant::now();
    let (answer, took) = job_beside_with(config, 4, move |id| {
        let mut stream = TcpStream::connect(id.root()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 1];
        let n = stream.read(&mut buf).unwrap_or(0);
        format!("closed after {:?} with {n} bytes", start.elapsed())
    });
    assert!(answer.contains("with 0 bytes"), "{answer}");
    // The job finished while the silent peer was still inside its handshake timeout.
    assert!(took < Duration::from_secs(2), "legitimate job took {took:?}");
}

#[test]
fn second_join_of_a_rank_is_refused_and_the_first_carries_on() {
    let config = config();
    let id = Bootstrap::create_local_id(&config).unwrap();
    let early: Vec<_> = (0..2)
        .map(|rank| {
            let config = config.clone();
            thread::spawn(move || Bootstrap::init(&id, rank, 3, &config, AbortFlag::new()).unwrap().allgather(&[rank as u8]).unwrap())
        })
        .collect();
    // Give ranks 0 and 1 time to join, then claim rank 0 again.
    thread::sleep(Duration::from_millis(300));
    let answer = play(id.root(), &frame(&Message::Hello(hello(&id, 0, 3))), true);
    assert!(answer.contains("joined twice"), "{answer}");
    let last = Bootstrap::init(&id, 2, 3, &config, AbortFlag::new()).unwrap().allgather(&[2]).unwrap();
    assert_eq!(last, vec![0, 1, 2]);
    for r in early {
        assert_eq!(r.join().unwrap(), vec![0, 1, 2]);
    }
}

#[test]
fn peers_refuse_strangers_too() {
    let config = config();
    let id = Bootstrap::create_local_id(&config).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // The ranks stay up until the strangers are done (a rank that had finished and closed
    // its endpoint would answer the last of them with a closed connection, not a refusal):
    // each waits for its sender to go, which it does also when an assertion fails.
    let (mut strangers_done, waits): (Vec<_>, Vec<_>) = (0..3).map(|_| std::sync::mpsc::channel::<()>()).unzip();
    let ranks: Vec<_> = (0..3u32)
        .zip(waits)
        .map(|(rank, strangers_done)| {
            let (config, tx) = (config.clone(), tx.clone());
            thread::spawn(move || {
                let b = Bootstrap::init(&id, rank, 3, &config, AbortFlag::new()).unwrap();
                tx.send((rank, b.listen_addr())).unwrap();
                // Strangers knock while the job works.
                b.barrier().unwrap();
                for round in 0..20u32 {
                    let next = (rank + 1) % 3;
                    b.send(next, 1, &round.to_le_bytes()).unwrap();
                    assert_eq!(b.recv((rank + 2) % 3, 1).unwrap(), round.to_le_bytes());
                }
                let _ = strangers_done.recv();
                b.barrier().unwrap();
            })
        })
        .collect();
    let mut addrs: Vec<(u32, SocketAddr)> = (0..3).map(|_| rx.recv().unwrap()).collect();
    addrs.sort();
    let target = addrs[1].1;
    let stranger = UniqueId::with_random_secret(id.root()).unwrap();
    assert!(play(target, &frame(&Message::Hello(hello(&stranger, 0, 3))), true).contains("wrong secret"));
    assert!(play(target, &frame(&Message::Hello(hello(&id, 1, 3))), true).contains("this rank"));
    let reply = play(target, &frame(&Message::Hello(hello(&id, 0, 4))), true);
    assert!(reply.contains("4 ranks"), "{reply}");
    assert!(play(target, b"\x05\x00\x00\x00garbage", true).starts_with("closed"));
    strangers_done.clear();
    for r in ranks {
        r.join().expect("legitimate rank failed");
    }
}
