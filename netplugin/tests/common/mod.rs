//! What the plugin's tests share: the library under the name NCCL looks for, and a
//! connected pair of comms.

#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use oxccl_transports::net::plugin::PluginNet;
use oxccl_transports::net::{CommConfig, Context, MemoryKind, Net, RecvBuffer, RecvComm, Request, SendComm};

/// libnccl-net-oxccl.so: cargo's libnccl_net_oxccl.so (built with this test, next to it)
/// copied under the name `NCCL_NET_PLUGIN=oxccl` makes NCCL look for, in a directory of
/// the tests (under cargo's directory for test files). The plugin's devices are
/// loopback (NCCL_SOCKET_IFNAME=lo, set here before anything in this process loads it), and
/// its comms have a helper thread and a data socket (NCCL_SOCKET_NTHREADS=1 unless the
/// test set it: what they get unset on hosts of 4 cores or more, not on CI's 2).
pub fn library() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
        if std::env::var_os("NCCL_SOCKET_NTHREADS").is_none() {
            std::env::set_var("NCCL_SOCKET_NTHREADS", "1");
        }
        let exe = std::env::current_exe().expect("the test's path");
        let built = exe.parent().into_iter().flat_map(|deps| [deps.join("libnccl_net_oxccl.so"), deps.join("../libnccl_net_oxccl.so")]).find(|path| path.exists());
        let built = built.unwrap_or_else(|| panic!("libnccl_net_oxccl.so is not next to {} (cargo builds it with the tests)", exe.display()));
        oxccl_testkit::copy_as(built, std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("netplugin"), "libnccl-net-oxccl.so")
    })
    .clone()
}

pub fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// A send comm connected to a receive comm of `net` on device 0, in one context.
pub fn pair(net: &dyn Net) -> (Context, SendComm, RecvComm) {
    let context = net.init(7, &CommConfig::default()).unwrap();
    let (handle, mut listen) = net.listen(&context, 0).unwrap();
    let until = deadline();
    let (mut send, mut recv) = (None, None);
    while send.is_none() || recv.is_none() {
        send = send.or(net.connect(&context, 0, &handle).unwrap());
        recv = recv.or(net.accept(&mut listen).unwrap());
        assert!(Instant::now() < until, "no connection");
    }
    net.close_listen(listen).unwrap();
    (context, send.unwrap(), recv.unwrap())
}

/// Tests every request in turn until all are done (a socket comm moves bytes only when
/// one of its requests is tested); answers each one's sizes.
pub fn wait_all(net: &dyn Net, requests: &mut [Request]) -> Vec<Vec<usize>> {
    let until = deadline();
    let mut sizes: Vec<Option<Vec<usize>>> = vec![None; requests.len()];
    while sizes.iter().any(Option::is_none) {
        for (request, sizes) in requests.iter_mut().zip(&mut sizes) {
            if sizes.is_none() {
                *sizes = net.test(request).unwrap();
            }
        }
        assert!(Instant::now() < until, "a request never completed");
    }
    sizes.into_iter().flatten().collect()
}

pub fn message(index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + index * 7) as u8).collect()
}

/// Sends one message per size and receives them in groups of up to `max_recvs`, each
/// group's buffers posted in reverse tag order, then checks every byte.
pub fn exchange(net: &PluginNet, sizes: &[usize]) {
    let (context, mut send, mut recv) = pair(net);
    let max_recvs = net.properties(0).unwrap().max_recvs;
    let messages: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(index, &len)| message(index, len)).collect();
    let mut buffers: Vec<Vec<u8>> = sizes.iter().map(|&len| vec![0u8; len + 3]).collect();
    let send_memory = net.reg_mr(&mut send, messages[0].as_ptr().cast_mut(), messages[0].len(), MemoryKind::Host).unwrap();
    let recv_memory = net.reg_mr(&mut recv, buffers[0].as_mut_ptr(), buffers[0].len(), MemoryKind::Host).unwrap();
    let mut index = 0;
    while index < sizes.len() {
        let group = max_recvs.min(sizes.len() - index);
        let posted: Vec<RecvBuffer> =
            buffers[index..index + group].iter_mut().enumerate().rev().map(|(i, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: (index + i) as u32 }).collect();
        // SAFETY: the buffers outlive the request, which is waited for below.
        let mut requests = vec![unsafe { net.irecv(&mut recv, &posted, &vec![&recv_memory; group]) }.unwrap().expect("room for a receive")];
        for (m, data) in messages.iter().enumerate().skip(index).take(group) {
            // SAFETY: messages outlive the requests, which are waited for below.
            requests.push(unsafe { net.isend(&mut send, data.as_ptr(), data.len(), m as u32, &send_memory) }.unwrap().expect("room for a send"));
        }
        let got = wait_all(net, &mut requests).swap_remove(0);
        assert_eq!(net.test(&mut requests[0]).unwrap().as_ref(), Some(&got), "asking again answers the same");
        for (position, buffer) in posted.iter().enumerate() {
            assert_eq!(got[position], sizes[buffer.tag as usize], "v{}: size of message {}", net.version(), buffer.tag);
        }
        index += group;
    }
    for (m, data) in messages.iter().enumerate() {
        assert!(buffers[m][..data.len()] == data[..], "v{}: message {m} corrupted", net.version());
    }
    net.dereg_mr(&mut send, send_memory).unwrap();
    net.dereg_mr(&mut recv, recv_memory).unwrap();
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.finalize(context).unwrap();
}
