//! The process's own connected TCP sockets and their buffer sizes, for tests that check
//! what a net asked of the sockets it made (`NCCL_SOCKET_SNDBUF`, `NCCL_SOCKET_RCVBUF`).

use std::os::fd::{BorrowedFd, RawFd};

/// Each connected TCP socket of this process: its descriptor, SO_SNDBUF and SO_RCVBUF as
/// the kernel reports them. Descriptors another thread closes meanwhile are skipped.
pub fn connected_tcp_buffers() -> Vec<(RawFd, usize, usize)> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter_map(|fd| {
            // SAFETY: only borrowed for these calls, never closed; a descriptor closed (or
            // reused) meanwhile makes the calls fail or describe the new one, no worse.
            #[allow(unsafe_code)]
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            let socket = socket2::SockRef::from(&borrowed);
            let tcp = socket.r#type().ok()? == socket2::Type::STREAM && socket.peer_addr().ok()?.as_socket().is_some();
            tcp.then_some((fd, socket.send_buffer_size().ok()?, socket.recv_buffer_size().ok()?))
        })
        .collect()
}

/// What Linux reports for a socket buffer of `asked` bytes: twice them, within the sysctl
/// `/proc/sys/net/core/<sysctl_max>` (`wmem_max` or `rmem_max`), which it also doubles.
pub fn reported_buffer_size(asked: usize, sysctl_max: &str) -> usize {
    let path = format!("/proc/sys/net/core/{sysctl_max}");
    let limit: usize = std::fs::read_to_string(&path).ok().and_then(|text| text.trim().parse().ok()).unwrap_or_else(|| panic!("{path} is not a number"));
    2 * asked.min(limit)
}
