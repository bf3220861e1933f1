//! libnccl-net-oxccl.so loaded by oxccl's own plugin loader, in one process over loopback:
//! every ABI version it exports moves data (grouped receives with tags included), keeps the
//! requests in flight the ABI promises, reports its properties, and logs and fails through
//! the ABI as NCCL expects.

mod common;

use std::sync::Arc;

use common::{exchange, library, pair};
use oxccl_transports::net::plugin::{self, PluginNet};
use oxccl_transports::net::{MemoryKind, Net, RecvBuffer, MAX_REQUESTS};
use oxccl_testkit::CapturedLogs;
use oxccl_transports::Error;

fn load(version: u32) -> Arc<PluginNet> {
    plugin::load_version(library().to_str().unwrap(), version).unwrap_or_else(|e| panic!("v{version}: {e}"))
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
    let data = vec![5u8; 1 << 20];
    // Longer than the messages that go ahead of their notices (1 MiB).
    let long = vec![5u8; (1 << 20) + 1];
    let early = net.reg_mr(&mut send, long.as_ptr().cast_mut(), long.len(), MemoryKind::Host).unwrap();
    // SAFETY: a refused send keeps nothing.
    let refused = unsafe { net.isend(&mut send, long.as_ptr(), long.len(), 1, &early) }.unwrap();
    assert!(refused.is_none(), "maxRecvs > 1: the plugin's comms are receiver-driven, a long send waits for its receive (a NULL request)");
    net.dereg_mr(&mut send, early).unwrap();
    let mut buffers = vec![vec![0u8; data.len()]; MAX_REQUESTS * max_recvs];
    // 32 receives of maxRecvs buffers (tags 1..), never tested: every receive stays in
    // flight, and nothing is read.
    let receives: Vec<_> = buffers
        .chunks_mut(max_recvs)
        .enumerate()
        .map(|(r, group)| {
            let posted: Vec<RecvBuffer> = group.iter_mut().enumerate().map(|(i, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: (r * max_recvs + i) as u32 + 1 }).collect();
            // SAFETY: the buffers outlive the requests (the comm is closed first).
            unsafe { net.irecv(&mut recv, &posted, &vec![&memory; max_recvs]) }.unwrap().expect("the plugin takes 32 receives per comm")
        })
        .collect();
    // 32 x maxRecvs sends of 1 MiB, each once its receive's notice is in (maxRecvs > 1: the
    // comm is receiver-driven), that nobody reads: the socket fills, the plugin queues.
    let send_memory = net.reg_mr(&mut send, data.as_ptr().cast_mut(), data.len(), MemoryKind::Host).unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let sends: Vec<_> = (0..MAX_REQUESTS * max_recvs)
        .map(|tag| loop {
            // SAFETY: data outlives the requests (the comm is closed first).
            if let Some(request) = unsafe { net.isend(&mut send, data.as_ptr(), data.len(), tag as u32 + 1, &send_memory) }.unwrap() {
                break request;
            }
            assert!(std::time::Instant::now() < until, "send {tag} of the 32 x maxRecvs the ABI promises was refused");
            std::thread::yield_now();
        })
        .collect();
    assert_eq!((receives.len(), sends.len()), (32, 32 * 8));
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.finalize(context).unwrap();
}

#[test]
fn log_lines_and_failures_come_back_through_the_abi() {
    let net = load(11);
    // With the capture below the process's only subscriber, tracing computes a callsite's
    // interest from the default of whichever thread hits it first: another test's thread
    // (no subscriber) would leave the plugin's INFO line cached as wanted by nobody. With a
    // global one beside it, every subscriber is asked.
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
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
