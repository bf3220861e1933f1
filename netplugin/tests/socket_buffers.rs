//! libnccl-net-oxccl.so with NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF set (in this test's
//! own process before the plugin loads, as NCCL's users set them): every connection of a
//! comm the plugin makes or accepts has those buffers, read back from the process's own
//! sockets, the plugin says so through NCCL's logger, and data still arrives whole.

mod common;

use common::{exchange, library, pair};
use oxccl_testkit::sockets::{connected_tcp_buffers, reported_buffer_size};
use oxccl_testkit::CapturedLogs;
use oxccl_transports::net::plugin;
use oxccl_transports::net::Net;

const SEND: usize = 96 << 10;
const RECV: usize = 80 << 10;

#[test]
fn every_connection_gets_the_socket_buffers_asked_for() {
    std::env::set_var("NCCL_SOCKET_SNDBUF", SEND.to_string());
    std::env::set_var("NCCL_SOCKET_RCVBUF", format!("{RECV:#x}"));
    let net = plugin::load_version(library().to_str().unwrap(), 12).unwrap();
    let logs = CapturedLogs::default();
    let (context, send, recv) = logs.during(|| pair(net.as_ref()));
    let line = format!("SO_SNDBUF {SEND} bytes and SO_RCVBUF {RECV} bytes asked for each connection");
    assert!(logs.lines().iter().any(|l| l.contains(&line)), "{line}: {:#?}", logs.lines());
    let sockets = connected_tcp_buffers();
    // Both ends of a control connection and a data connection (NCCL_SOCKET_NTHREADS=1).
    assert_eq!(sockets.len(), 4, "{sockets:?}");
    let asked = (reported_buffer_size(SEND, "wmem_max"), reported_buffer_size(RECV, "rmem_max"));
    for (fd, send, recv) in sockets {
        assert_eq!((send, recv), asked, "socket {fd}");
    }
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.finalize(context).unwrap();
    exchange(&net, &[0, 1, 65536, (8 << 20) + 5, 100_000]);
}
