//! libnccl-net-oxccl.so with NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF set (in this test's
//! own process before the plugin loads, as NCCL's users set them): every connection of a
//! comm the plugin makes or accepts has those buffers, read back from the process's own
//! sockets, the plugin says so through NCCL's logger, and data still arrives whole.

mod common;

use std::os::fd::{BorrowedFd, RawFd};

use common::{exchange, library, pair};
use oxccl_testkit::CapturedLogs;
use oxccl_transports::net::plugin;
use oxccl_transports::net::Net;

const SEND: usize = 96 << 10;
const RECV: usize = 80 << 10;

/// The process's connected TCP sockets (the plugin's comms: the test makes no others).
fn connected_sockets() -> Vec<RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| {
            // SAFETY: the descriptor is open for the length of this call (the test's only
            // other thread does not close sockets), and a borrowed one is not closed.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let socket = socket2::SockRef::from(&fd);
            socket.r#type().is_ok_and(|t| t == socket2::Type::STREAM) && socket.peer_addr().is_ok()
        })
        .collect()
}

/// What Linux reports for `asked` bytes: twice them, within the sysctl's maximum.
fn reported(asked: usize, max: &str) -> usize {
    let limit: usize = std::fs::read_to_string(format!("/proc/sys/net/core/{max}")).unwrap().trim().parse().unwrap();
    2 * asked.min(limit)
}

#[test]
fn every_connection_gets_the_socket_buffers_asked_for() {
    std::env::set_var("NCCL_SOCKET_SNDBUF", SEND.to_string());
    std::env::set_var("NCCL_SOCKET_RCVBUF", format!("{RECV:#x}"));
    let net = plugin::load_version(library().to_str().unwrap(), 12).unwrap();
    let logs = CapturedLogs::default();
    let (context, send, recv) = logs.during(|| pair(net.as_ref()));
    let line = format!("SO_SNDBUF {SEND} bytes and SO_RCVBUF {RECV} bytes asked for each connection");
    assert!(logs.lines().iter().any(|l| l.contains(&line)), "{line}: {:#?}", logs.lines());
    let sockets = connected_sockets();
    // Both ends of a control connection and a data connection (NCCL_SOCKET_NTHREADS=1).
    assert_eq!(sockets.len(), 4, "{sockets:?}");
    for fd in sockets {
        // SAFETY: as in connected_sockets: open, and only borrowed.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&borrowed);
        assert_eq!((socket.send_buffer_size().unwrap(), socket.recv_buffer_size().unwrap()), (reported(SEND, "wmem_max"), reported(RECV, "rmem_max")), "socket {fd}");
    }
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.finalize(context).unwrap();
    exchange(&net, &[0, 1, 65536, (8 << 20) + 5, 100_000]);
}
