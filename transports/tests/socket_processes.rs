//! The socket Net between two real processes on loopback: messages of 0, 1, 4097 bytes and
//! 64 MiB with one and with eight receives per `irecv`, over the default streams and over
//! 4 helper threads of 4 data sockets each, 64 MiB throughput, and a sender killed
//! mid-message (the receive must fail, not hang). Each child has a hard timeout. The
//! receiving parent listens, so its streams are the comm's.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::{child_role, gigabytes_per_second, hex, stream, unhex, ChildProcess};
use oxccl_transports::net::socket::{SocketNet, StreamSettings};
use oxccl_transports::net::{CommConfig, MemoryKind, Net, RecvBuffer, RecvComm, Request};
use oxccl_transports::Error;

const HANDLE_VAR: &str = "OXCCL_TEST_NET_HANDLE";
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const SIZES: [usize; 10] = [0, 1, 4097, 64 << 20, 0, 1, 4097, 100_000, 3, 64 << 20];
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

fn wait(net: &SocketNet, request: &mut Request) -> Result<Vec<usize>, Error> {
    let until = Instant::now() + CHILD_TIMEOUT;
    loop {
        if let Some(sizes) = net.test(request)? {
            return Ok(sizes);
        }
        assert!(Instant::now() < until, "request never completed");
    }
}

/// Message `index` of a test run: the test stream shifted by the index.
fn message(index: usize, len: usize) -> Vec<u8> {
    let mut data = stream(len + index);
    data.drain(..index);
    data
}

/// The sending half of every test below, selected by role.
#[test]
fn child() {
    let Some(role) = child_role() else { return };
    let net = SocketNet::new(LOOPBACK);
    let context = net.init(0, &CommConfig::default()).unwrap();
    let handle = unhex(&std::env::var(HANDLE_VAR).unwrap());
    let until = Instant::now() + CHILD_TIMEOUT;
    let mut send = loop {
        if let Some(send) = net.connect(&context, 0, &handle).unwrap() {
            break send;
        }
        assert!(Instant::now() < until, "no connection");
    };
    let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let messages: Vec<Vec<u8>> = match role.as_str() {
        "send-sizes" => SIZES.iter().enumerate().map(|(index, &len)| message(index, len)).collect(),
        "send-start-then-64-mib" | "send-and-hang" => vec![vec![1], stream(64 << 20)],
        // More than the kernel buffers of 16 sockets hold while nobody reads.
        "send-and-hang-256-mib" => vec![vec![1], stream(256 << 20)],
        other => panic!("unknown role {other}"),
    };
    // Every message in flight at once, as a proxy engine posts them.
    let mut requests: Vec<Request> = messages
        .iter()
        .enumerate()
        // SAFETY: messages outlive the requests, which are waited for below.
        .map(|(tag, data)| unsafe { net.isend(&mut send, data.as_ptr(), data.len(), tag as u32, &registration) }.unwrap().unwrap())
        .collect();
    if role.starts_with("send-and-hang") {
        println!("SENDING");
        std::thread::sleep(CHILD_TIMEOUT);
    }
    for (request, data) in requests.iter_mut().zip(&messages) {
        assert_eq!(wait(&net, request).unwrap(), vec![data.len()]);
    }
    net.close_send(send).unwrap();
}

/// Starts a child in `role`, connected to a new listener of `net`; returns it and the comm.
fn accept_child(net: &SocketNet, role: &str) -> (ChildProcess, RecvComm) {
    let context = net.init(0, &CommConfig::default()).unwrap();
    let (handle, mut listen) = net.listen(&context, 0).unwrap();
    let child = ChildProcess::start("child", role, &[(HANDLE_VAR, hex(&handle))]);
    let until = Instant::now() + CHILD_TIMEOUT;
    loop {
        if let Some(recv) = net.accept(&mut listen).unwrap() {
            net.close_listen(listen).unwrap();
            return (child, recv);
        }
        assert!(Instant::now() < until, "the child never connected");
    }
}

/// 4 helper threads of 4 data sockets each.
const FOUR_BY_FOUR: StreamSettings = StreamSettings { threads: Some(4), sockets_per_thread: Some(4), helpers_by_default: true };

/// Receives `SIZES` from a child process in groups of up to `max_recvs` buffers.
fn receive_sizes_from_a_child(max_recvs: usize, streams: StreamSettings) {
    let net = SocketNet::with_max_recvs(LOOPBACK, max_recvs).with_streams(streams);
    let (mut sender, mut recv) = accept_child(&net, "send-sizes");
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffers: Vec<Vec<u8>> = SIZES.iter().map(|&len| vec![0u8; len + 1]).collect();
    let mut pointers: Vec<RecvBuffer> = buffers.iter_mut().enumerate().map(|(tag, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: tag as u32 }).collect();
    // Every group posted before any completes.
    let mut requests = Vec::new();
    for group in pointers.chunks_mut(max_recvs) {
        let registrations = vec![&registration; group.len()];
        // SAFETY: buffers outlive the requests, which are waited for below.
        requests.push((group.to_vec(), unsafe { net.irecv(&mut recv, group, &registrations) }.unwrap().unwrap()));
    }
    for (group, request) in &mut requests {
        let sizes = wait(&net, request).unwrap();
        for (buffer, size) in group.iter().zip(sizes) {
            assert_eq!(size, SIZES[buffer.tag as usize], "size of message {}", buffer.tag);
        }
    }
    sender.wait_success(CHILD_TIMEOUT);
    for (index, buffer) in buffers.iter().enumerate() {
        assert!(buffer[..SIZES[index]] == message(index, SIZES[index])[..], "message {index} corrupted");
    }
    let stats = net.stats().snapshot();
    assert_eq!(stats.irecv_calls, SIZES.len().div_ceil(max_recvs) as u64);
    assert_eq!(stats.irecv_grouped > 0, max_recvs > 1);
    assert_eq!(stats.bytes_received, SIZES.iter().sum::<usize>() as u64);
}

#[test]
fn sizes_up_to_64_mib_from_a_process_one_receive_per_call() {
    receive_sizes_from_a_child(1, StreamSettings::default());
}

#[test]
fn sizes_up_to_64_mib_from_a_process_eight_receives_per_call() {
    receive_sizes_from_a_child(8, StreamSettings::default());
}

#[test]
fn sizes_up_to_64_mib_from_a_process_over_four_threads_of_four_sockets() {
    receive_sizes_from_a_child(1, FOUR_BY_FOUR);
    receive_sizes_from_a_child(8, FOUR_BY_FOUR);
}

/// Posts a 1-byte receive (tag 0) into `start` and one of all `data` (tag 1).
fn post_start_and_data(net: &SocketNet, recv: &mut RecvComm, start: &mut [u8; 1], data: &mut [u8]) -> (Request, Request) {
    let registration = net.reg_mr(recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    // SAFETY: the callers keep start and data alive until both requests are done or failed.
    unsafe {
        (
            net.irecv(recv, &[RecvBuffer { data: start.as_mut_ptr(), len: 1, tag: 0 }], &[&registration]).unwrap().unwrap(),
            net.irecv(recv, &[RecvBuffer { data: data.as_mut_ptr(), len: data.len(), tag: 1 }], &[&registration]).unwrap().unwrap(),
        )
    }
}

#[test]
fn sixty_four_mib_throughput_between_processes() {
    let net = SocketNet::new(LOOPBACK);
    let (mut sender, mut recv) = accept_child(&net, "send-start-then-64-mib");
    let (mut start, mut data) = ([0u8; 1], vec![0u8; 64 << 20]);
    let (mut first, mut second) = post_start_and_data(&net, &mut recv, &mut start, &mut data);
    // Timed from the arrival of the 1-byte message the child sends just before the 64 MiB.
    wait(&net, &mut first).unwrap();
    let started = Instant::now();
    assert_eq!(wait(&net, &mut second).unwrap(), vec![64 << 20]);
    let elapsed = started.elapsed();
    sender.wait_success(CHILD_TIMEOUT);
    assert!(data == stream(64 << 20), "64 MiB arrived corrupted");
    eprintln!("socket net, loopback: 64 MiB in {:.1} ms = {:.2} GB/s", elapsed.as_secs_f64() * 1e3, gigabytes_per_second(64 << 20, elapsed));
}

/// A sender killed while its message of `bytes` is on the way: the receive fails.
fn sender_killed_mid_message(streams: StreamSettings, role: &str, bytes: usize) -> Error {
    let net = SocketNet::new(LOOPBACK).with_streams(streams);
    let (mut sender, mut recv) = accept_child(&net, role);
    sender.read_tagged_line("SENDING", CHILD_TIMEOUT);
    sender.kill_and_reap();
    let (mut start, mut data) = ([0u8; 1], vec![0u8; bytes]);
    let (mut first, mut second) = post_start_and_data(&net, &mut recv, &mut start, &mut data);
    // What arrived before the kill is delivered; the cut-off message fails.
    assert_eq!(wait(&net, &mut first).unwrap(), vec![1]);
    let err = wait(&net, &mut second).unwrap_err();
    assert!(matches!(err, Error::Closed(_)), "{err}");
    err
}

#[test]
fn a_sender_killed_mid_message_fails_the_receive() {
    sender_killed_mid_message(StreamSettings::default(), "send-and-hang", 64 << 20);
}

#[test]
fn a_sender_killed_mid_message_fails_the_receive_over_four_threads_of_four_sockets() {
    let err = sender_killed_mid_message(FOUR_BY_FOUR, "send-and-hang-256-mib", 256 << 20).to_string();
    assert!(err.contains("data socket") && err.contains("of 16 from 127.0.0.1") && err.contains("still to move"), "{err}");
}

#[test]
fn a_sender_killed_mid_message_fails_the_receive_without_helpers() {
    let none = StreamSettings { threads: Some(0), ..StreamSettings::default() };
    let err = sender_killed_mid_message(none, "send-and-hang", 64 << 20).to_string();
    assert!(err.contains("the sender closed the control connection"), "{err}");
}
