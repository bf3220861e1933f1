//! libnccl-net-oxccl.so loaded by oxccl's own plugin loader, in one process over loopback:
//! every ABI version it exports moves data (grouped receives with tags included), keeps the
//! requests in flight the ABI promises, reports its properties, and logs and fails through
//! the ABI as NCCL expects.

mod common;

use std::sync::Arc;

use common::{library, pair, wait_all};
use oxccl_transports::net::plugin::{self, PluginNet};
use oxccl_transports::net::{MemoryKind, Net, RecvBuffer, MAX_REQUESTS};
use oxccl_testkit::CapturedLogs;
use oxccl_transports::Error;

fn load(version: u32) -> Arc<PluginNet> {
    plugin::load_version(library().to_str().unwrap(), version).unwrap_or_else(|e| panic!("v{version}: {e}"))
}

fn message(index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + index * 7) as u8).collect()
}

/// Sends one message per size and receives them in groups of up to `max_recvs`, each
/// group's buffers posted in reverse tag order, then checks every byte.
fn exchange(net: &PluginNet, sizes: &[usize]) {
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

#[test]
fn every_exported_version_moves_data_in_grouped_receives() {
    let sizes = [0, 1, 4097, 4 << 20, 3, 0, 100_000, 7, 8, 9, 10, 11];
    for version in [12, 11, 10, 9] {
        let net = load(version);
        assert_eq!((net.name(), net.version()), ("oxccl", version));
        assert!(net.label().contains("libnccl-net-oxccl.so"), "{}", net.label());
        exchange(&net, &sizes);
    }
}

#[test]
fn properties_are_those_of_the_socket_net_on_the_chosen_interface() {
    let net = load(12);
    assert_eq!(net.devices().unwrap(), 1, "NCCL_SOCKET_IFNAME=lo: one device");
    let properties = net.properties(0).unwrap();
    assert_eq!((properties.name.as_str(), properties.max_recvs, properties.speed_mbps), ("lo", 8, 10_000));
    assert!(properties.ptr_support.host && !properties.ptr_support.cuda && !properties.ptr_support.dmabuf);
    let err = net.properties(1).unwrap_err().to_string();
    assert!(err.contains("getProperties") && err.contains("ncclInternalError"), "{err}");
}

#[test]
fn requests_in_flight_are_those_the_abi_promises() {
    let net = load(12);
    let (context, mut send, mut recv) = pair(net.as_ref());
    let max_recvs = net.properties(0).unwrap().max_recvs;
    let memory = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffers = vec![[0u8; 8]; MAX_REQUESTS];
    // Nothing is sent: every receive stays in flight.
    let receives: Vec<_> = buffers
        .iter_mut()
        .map(|b| {
            let posted = [RecvBuffer { data: b.as_mut_ptr(), len: 8, tag: 0 }];
            // SAFETY: the buffers outlive the requests (the comm is closed first).
            unsafe { net.irecv(&mut recv, &posted, &[&memory]) }.unwrap().expect("the plugin takes 32 receives per comm")
        })
        .collect();
    // 32 x maxRecvs sends of 1 MiB that nobody reads: the socket fills, the plugin queues.
    let data = vec![5u8; 1 << 20];
    let send_memory = net.reg_mr(&mut send, data.as_ptr().cast_mut(), data.len(), MemoryKind::Host).unwrap();
    let sends: Vec<_> = (0..MAX_REQUESTS * max_recvs)
        // SAFETY: data outlives the requests (the comm is closed first).
        .map(|tag| unsafe { net.isend(&mut send, data.as_ptr(), data.len(), tag as u32 + 1, &send_memory) }.unwrap().expect("32 x maxRecvs sends per comm"))
        .collect();
    assert_eq!((receives.len(), sends.len()), (32, 32 * 8));
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.finalize(context).unwrap();
}

#[test]
fn log_lines_and_failures_come_back_through_the_abi() {
    let net = load(11);
    let logs = CapturedLogs::default();
    let err = logs.during(|| {
        let context = net.init(0xfeed, &Default::default()).unwrap();
        let err = net.connect(&context, 0, b"not a handle of this net").unwrap_err();
        net.finalize(context).unwrap();
        err
    });
    assert!(logs.has("INFO", "oxccl::net", "NET/Plugin: NET/oxccl: initialized for communicator 0xfeed"), "{:#?}", logs.lines());
    assert!(logs.has("WARN", "oxccl::net", "connect: malformed socket listen handle"), "{:#?}", logs.lines());
    let Error::Plugin { plugin, call, reason } = &err else { panic!("{err}") };
    assert!(plugin.contains("libnccl-net-oxccl.so") && plugin.contains("v11"), "{err}");
    assert_eq!((call.as_str(), reason.as_str()), ("connect", "returned ncclInternalError (3)"));
}
