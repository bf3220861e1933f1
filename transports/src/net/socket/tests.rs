use super::handshake::{decode_handle, encode_handle, Greeting, Handle};
use super::*;
use crate::net::HANDLE_MAX_BYTES;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, TcpStream};
use std::time::{Duration, Instant};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

pub(super) fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

pub(super) fn context(net: &SocketNet) -> Context {
    net.init(1, &CommConfig::default()).unwrap()
}

/// Connects a send comm to a receive comm of `net`, calling both sides until done.
pub(super) fn pair(net: &SocketNet) -> (SendComm, RecvComm) {
    pair_between(net, net)
}

/// Connects a send comm of `sender` to a receive comm of `receiver` (whose streams count).
pub(super) fn pair_between(sender: &SocketNet, receiver: &SocketNet) -> (SendComm, RecvComm) {
    let (net, context) = (receiver, context(receiver));
    let (handle, mut listen) = net.listen(&context, 0).unwrap();
    let comms = connect_and_accept(sender, receiver, &context, &handle, &mut listen);
    net.close_listen(listen).unwrap();
    net.finalize(context).unwrap();
    comms
}

/// Calls `sender`'s `connect` with `handle` and `receiver`'s `accept` on `listen` until both
/// gave their comm (within the test's deadline).
pub(super) fn connect_and_accept(sender: &SocketNet, receiver: &SocketNet, context: &Context, handle: &[u8], listen: &mut ListenComm) -> (SendComm, RecvComm) {
    let until = deadline();
    let (mut send, mut recv) = (None, None);
    while send.is_none() || recv.is_none() {
        if send.is_none() {
            send = sender.connect(context, 0, handle).unwrap();
        }
        if recv.is_none() {
            recv = receiver.accept(listen).unwrap();
        }
        assert!(Instant::now() < until, "no connection");
    }
    (send.unwrap(), recv.unwrap())
}

pub(super) fn wait(net: &SocketNet, request: &mut Request) -> Vec<usize> {
    let until = deadline();
    loop {
        if let Some(sizes) = net.test(request).unwrap() {
            return sizes;
        }
        assert!(Instant::now() < until, "request never completed");
        // Leave the cores to the helper threads (CI has two).
        std::thread::yield_now();
    }
}

pub(super) fn wait_error(net: &SocketNet, request: &mut Request) -> Error {
    match wait_end(net, request) {
        Err(e) => e,
        Ok(sizes) => panic!("completed with {sizes:?}"),
    }
}

/// How `request` ends: its sizes, or its error.
pub(super) fn wait_end(net: &SocketNet, request: &mut Request) -> Result<Vec<usize>> {
    let until = deadline();
    loop {
        if let Some(end) = net.test(request).transpose() {
            return end;
        }
        assert!(Instant::now() < until, "request never ended");
        std::thread::yield_now();
    }
}

pub(super) fn message(index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + index * 7 + i / 251) as u8).collect()
}

/// Sends one message per size from a second thread and receives them in groups of up to
/// `max_recvs`, each buffer 5 bytes larger than its message.
fn exchange(max_recvs: usize, sizes: &[usize]) {
    exchange_over(Arc::new(SocketNet::with_max_recvs(LOOPBACK, max_recvs)), max_recvs, sizes);
}

/// As [`exchange`], over `net` (taking `max_recvs` buffers per `irecv`).
pub(super) fn exchange_over(net: Arc<SocketNet>, max_recvs: usize, sizes: &[usize]) {
    let (mut send, mut recv) = pair(&net);
    let messages: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(m, &len)| message(m, len)).collect();
    let sender = {
        let (net, messages) = (net.clone(), messages.clone());
        std::thread::spawn(move || {
            let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
            for (m, data) in messages.iter().enumerate() {
                let until = deadline();
                let mut request = loop {
                    // SAFETY: data outlives the request, which is waited for below.
                    if let Some(request) = unsafe { net.isend(&mut send, data.as_ptr(), data.len(), m as u32, &registration) }.unwrap() {
                        break request;
                    }
                    assert!(Instant::now() < until);
                    std::thread::yield_now();
                };
                assert_eq!(wait(&net, &mut request), vec![data.len()]);
            }
            net.dereg_mr(&mut send, registration).unwrap();
            net.close_send(send).unwrap();
        })
    };
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut m = 0;
    while m < messages.len() {
        let group = max_recvs.min(messages.len() - m);
        let mut buffers: Vec<Vec<u8>> = (0..group).map(|i| vec![0u8; sizes[m + i] + 5]).collect();
        // Post the group's buffers in reverse tag order: tags, not positions, pick buffers.
        let posted: Vec<RecvBuffer> = buffers.iter_mut().enumerate().rev().map(|(i, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: (m + i) as u32 }).collect();
        let registrations = vec![&registration; group];
        // SAFETY: buffers outlive the request, which is waited for below.
        let mut request = unsafe { net.irecv(&mut recv, &posted, &registrations) }.unwrap().unwrap();
        let received = wait(&net, &mut request);
        assert_eq!(net.test(&mut request).unwrap().as_ref(), Some(&received), "asking again answers the same");
        for (position, buffer) in posted.iter().enumerate() {
            let index = buffer.tag as usize;
            assert_eq!(received[position], sizes[index], "size of message {index}");
            assert!(buffers[index - m][..sizes[index]] == messages[index][..], "message {index} corrupted");
        }
        m += group;
    }
    sender.join().unwrap();
    let stats = net.stats().snapshot();
    let total: usize = sizes.iter().sum();
    assert_eq!(stats.irecv_buffers, sizes.len() as u64);
    assert_eq!((stats.bytes_sent, stats.bytes_received), (total as u64, total as u64));
    assert_eq!(stats.irecv_calls, sizes.len().div_ceil(max_recvs) as u64);
    assert_eq!(stats.irecv_grouped > 0, max_recvs > 1 && sizes.len() > 1);
}

/// Messages sent back to back (none waited for before the next is queued), so that one
/// read takes the end of one and the start of the next: sizes about the receiver's 64 KiB
/// stage, whose rests are read straight into their buffers with what follows them.
#[test]
fn messages_sent_back_to_back_about_the_stage_size_arrive_whole() {
    let net = Arc::new(SocketNet::with_max_recvs(LOOPBACK, 1));
    let (mut send, mut recv) = pair(&net);
    let sizes = [70_000, 10, 65_541, 3, 130_000, 1, 64 << 10, 0, 65_535, 200_000, 2, 65_524, 65_536];
    let messages: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(m, &len)| message(m, len)).collect();
    let sender = {
        let (net, messages) = (net.clone(), messages.clone());
        std::thread::spawn(move || {
            let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
            let mut requests = std::collections::VecDeque::new();
            for (m, data) in messages.iter().enumerate() {
                let until = deadline();
                loop {
                    // SAFETY: data outlives the request, which is waited for below.
                    if let Some(request) = unsafe { net.isend(&mut send, data.as_ptr(), data.len(), m as u32, &registration) }.unwrap() {
                        requests.push_back(request);
                        break;
                    }
                    // A full queue: the oldest send makes room once done.
                    let oldest: &mut Request = requests.front_mut().expect("a full queue holds sends");
                    if net.test(oldest).unwrap().is_some() {
                        requests.pop_front();
                    }
                    assert!(Instant::now() < until);
                }
            }
            for mut request in requests {
                wait(&net, &mut request);
            }
            net.dereg_mr(&mut send, registration).unwrap();
            net.close_send(send).unwrap();
        })
    };
    // Every receive posted before any is waited for: the messages stream in behind each other.
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffers: Vec<Vec<u8>> = sizes.iter().map(|&len| vec![0u8; len + 5]).collect();
    let mut requests = Vec::new();
    for (m, buffer) in buffers.iter_mut().enumerate() {
        let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: buffer.len(), tag: m as u32 }];
        let until = deadline();
        loop {
            // SAFETY: the buffers outlive the requests, which are waited for below.
            if let Some(request) = unsafe { net.irecv(&mut recv, &posted, &[&registration]) }.unwrap() {
                requests.push(request);
                break;
            }
            assert!(Instant::now() < until, "the receive of message {m} was never taken");
            let _ = net.test(&mut requests[0]).unwrap();
        }
    }
    for (m, mut request) in requests.into_iter().enumerate() {
        assert_eq!(wait(&net, &mut request), vec![sizes[m]], "size of message {m}");
        assert!(buffers[m][..sizes[m]] == messages[m][..], "message {m} corrupted");
    }
    sender.join().unwrap();
    let total: u64 = sizes.iter().map(|&s| s as u64).sum();
    assert_eq!(net.stats().snapshot().bytes_received, total);
}

#[test]
fn messages_of_many_sizes_with_one_receive_per_call() {
    exchange(1, &[0, 1, 4097, 64 << 20, 3, 0, 100_000, 7, 8, 9]);
}

#[test]
fn messages_of_many_sizes_with_eight_receives_per_call() {
    exchange(8, &[0, 1, 4097, 64 << 20, 3, 0, 100_000, 7, 8, 9]);
}

#[test]
fn too_small_a_buffer_is_an_error_naming_both_sizes() {
    let net = SocketNet::new(LOOPBACK);
    let (mut send, mut recv) = pair(&net);
    let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let data = [1u8; 100];
    // SAFETY: data lives to the end of the test.
    let mut sent = unsafe { net.isend(&mut send, data.as_ptr(), 100, 0, &registration) }.unwrap().unwrap();
    wait(&net, &mut sent);
    let mut buffer = [0u8; 10];
    let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: 10, tag: 0 }];
    // SAFETY: buffer lives to the end of the test.
    let mut request = unsafe { net.irecv(&mut recv, &posted, &[&registration]) }.unwrap().unwrap();
    let err = wait_error(&net, &mut request);
    assert!(matches!(err, Error::MessageTooLarge { message: 100, buffer: 10, tag: 0 }), "{err}");
    assert!(err.to_string().contains("100 bytes") && err.to_string().contains("10-byte"), "{err}");
}

#[test]
fn a_message_whose_tag_is_not_posted_is_an_error() {
    // An eager comm: its sender sends at once (a receiver-driven one's waits for the tag).
    let net = SocketNet::new(LOOPBACK);
    let (mut send, mut recv) = pair(&net);
    let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    // SAFETY: a zero-byte message reads no memory.
    let mut sent = unsafe { net.isend(&mut send, std::ptr::null(), 0, 7, &registration) }.unwrap().unwrap();
    wait(&net, &mut sent);
    let mut buffer = [0u8; 4];
    let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: 4, tag: 0 }];
    // SAFETY: buffer lives to the end of the test.
    let mut request = unsafe { net.irecv(&mut recv, &posted, &[&registration]) }.unwrap().unwrap();
    let err = wait_error(&net, &mut request).to_string();
    assert!(err.contains("tag 7") && err.contains("[0]"), "{err}");
}

#[test]
fn receives_out_of_range_are_refused() {
    let net = SocketNet::with_max_recvs(LOOPBACK, 2);
    let (_send, mut recv) = pair(&net);
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffer = [0u8; 4];
    let one = RecvBuffer { data: buffer.as_mut_ptr(), len: 4, tag: 0 };
    // SAFETY: every call below is refused before touching any buffer.
    unsafe {
        assert!(net.irecv(&mut recv, &[], &[]).is_err());
        assert!(net.irecv(&mut recv, &[one, one, one], &[&registration; 3]).is_err());
        assert!(net.irecv(&mut recv, &[one], &[]).is_err());
        let null = RecvBuffer { data: std::ptr::null_mut(), len: 4, tag: 0 };
        assert!(net.irecv(&mut recv, &[null], &[&registration]).is_err());
    }
    assert!(net.reg_mr(&mut recv, buffer.as_mut_ptr(), 4, MemoryKind::Cuda).is_err());
}

#[test]
fn a_full_send_queue_asks_to_try_again_later() {
    let net = SocketNet::new(LOOPBACK);
    let (mut send, _recv) = pair(&net);
    let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let data = vec![0u8; 1 << 20];
    let mut requests = Vec::new();
    // Nobody reads: the socket buffers fill, then the queue.
    let refused = (0..4 * MAX_REQUESTS).any(|tag| {
        // SAFETY: data outlives the requests (dropped at the end of the test, after them).
        match unsafe { net.isend(&mut send, data.as_ptr(), data.len(), tag as u32, &registration) }.unwrap() {
            Some(request) => {
                requests.push(request);
                false
            }
            None => true,
        }
    });
    assert!(refused, "isend never answered 'later'");
    net.close_send(send).unwrap();
}

#[test]
fn a_sender_that_goes_away_fails_the_pending_receive() {
    let net = SocketNet::new(LOOPBACK);
    let (send, mut recv) = pair(&net);
    net.close_send(send).unwrap();
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffer = [0u8; 4];
    // SAFETY: buffer lives to the end of the test.
    let mut request = unsafe { net.irecv(&mut recv, &[RecvBuffer { data: buffer.as_mut_ptr(), len: 4, tag: 0 }], &[&registration]) }.unwrap().unwrap();
    assert!(matches!(wait_error(&net, &mut request), Error::Closed(_)));
}

#[test]
fn strangers_are_dropped_and_the_expected_peer_still_accepted() {
    let net = SocketNet::with_max_recvs(LOOPBACK, 8);
    let context = context(&net);
    let (handle, mut listen) = net.listen(&context, 0).unwrap();
    let Handle { addr, magic, .. } = decode_handle(&handle).unwrap();
    let mut wrong = TcpStream::connect(addr).unwrap();
    wrong.write_all(&Greeting { magic: magic ^ 1, comm: 1, number: 0, sockets: 1 }.encode()).unwrap();
    let _silent = TcpStream::connect(addr).unwrap();
    drop(TcpStream::connect(addr).unwrap()); // closes before greeting
    let send = loop {
        if let Some(send) = net.connect(&context, 0, &handle).unwrap() {
            break send;
        }
    };
    let until = deadline();
    let recv = loop {
        if let Some(recv) = net.accept(&mut listen).unwrap() {
            break recv;
        }
        assert!(Instant::now() < until);
    };
    // The silent one is still waiting for its greeting; the other two are gone.
    assert_eq!(net.stats().snapshot().strangers_refused, 2);
    drop((send, recv));
}

#[test]
fn connecting_to_nobody_fails() {
    let net = SocketNet::new(LOOPBACK);
    let context = context(&net);
    let (handle, listen) = net.listen(&context, 0).unwrap();
    net.close_listen(listen).unwrap();
    let until = deadline();
    let err = loop {
        match net.connect(&context, 0, &handle) {
            Err(e) => break e,
            Ok(Some(_)) => panic!("connected to a closed listener"),
            Ok(None) => assert!(Instant::now() < until),
        }
    };
    assert!(err.to_string().contains("refused"), "{err}");
}

#[test]
fn handles_round_trip_and_garbage_is_refused() {
    for (addr, threads, sockets, cleared) in [("127.0.0.1:5000", 0, 0, false), ("[::1]:65535", 16, 64, true)] {
        let handle = Handle { addr: addr.parse().unwrap(), magic: 42, streams: Streams { threads, sockets }, cleared };
        let bytes = encode_handle(&handle);
        assert!(bytes.len() <= HANDLE_MAX_BYTES);
        assert_eq!(decode_handle(&bytes).unwrap(), handle);
    }
    let mut odd = encode_handle(&Handle { addr: "127.0.0.1:1".parse().unwrap(), magic: 1, streams: Streams { threads: 3, sockets: 3 }, cleared: false });
    odd[13] = 4; // 4 sockets over 3 threads
    let err = net_connect_error(&odd);
    assert!(err.contains("3 helper threads and 4 data sockets"), "{err}");
    odd[13] = 3;
    odd[14] = 2;
    let err = net_connect_error(&odd);
    assert!(err.contains("unknown flags 0x2"), "{err}");
    let net = SocketNet::new(LOOPBACK);
    let context = context(&net);
    assert!(net.connect(&context, 0, b"nonsense").is_err());
    let mut truncated = encode_handle(&Handle { addr: "[::1]:1".parse().unwrap(), magic: 1, streams: Streams { threads: 1, sockets: 1 }, cleared: false });
    truncated.pop();
    assert!(net.connect(&context, 0, &truncated).is_err());
    // The format before (OXS5: messages in pieces from 64 KiB) is refused.
    let mut older = encode_handle(&Handle { addr: "127.0.0.1:1".parse().unwrap(), magic: 1, streams: Streams { threads: 1, sockets: 1 }, cleared: true });
    older[..4].copy_from_slice(b"OXS5");
    let err = net_connect_error(&older);
    assert!(err.contains("not a socket-net handle of this version"), "{err}");
}

#[test]
fn a_handle_padded_to_the_abi_size_connects() {
    let net = SocketNet::new(LOOPBACK);
    let context = context(&net);
    let (mut handle, mut listen) = net.listen(&context, 0).unwrap();
    handle.resize(HANDLE_MAX_BYTES, 0xA5);
    let _comms = connect_and_accept(&net, &net, &context, &handle, &mut listen);
    net.finalize(context).unwrap();
}

#[test]
fn each_interface_is_a_device() {
    let net = SocketNet::with_devices(vec![SocketDevice::interface("lo", LOOPBACK), SocketDevice::address(IpAddr::V6(Ipv6Addr::LOCALHOST))], 2);
    assert_eq!(net.devices().unwrap(), 2);
    let (lo, v6) = (net.properties(0).unwrap(), net.properties(1).unwrap());
    assert_eq!((lo.name.as_str(), lo.speed_mbps, lo.pci_path.as_deref(), lo.guid), ("lo", DEFAULT_SPEED_MBPS, None, 0));
    assert_eq!((v6.name.as_str(), v6.guid, v6.max_recvs), ("socket:::1", 1, 2));
    let context = context(&net);
    let (handle, _listen) = net.listen(&context, 1).unwrap();
    assert_eq!(decode_handle(&handle).unwrap().addr.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    let err = net.listen(&context, 2).unwrap_err().to_string();
    assert!(err.contains("device 2") && err.contains("there are 2"), "{err}");
}

#[test]
fn properties_are_reported() {
    let net = SocketNet::with_max_recvs(LOOPBACK, 8);
    let properties = net.properties(0).unwrap();
    assert_eq!((properties.max_recvs, properties.max_comms), (8, 65536));
    assert!(properties.ptr_support.host && !properties.ptr_support.cuda);
    assert_eq!(SocketNet::new(LOOPBACK).properties(0).unwrap().max_recvs, 1);
    assert!(net.properties(1).is_err());
    assert_eq!(net.devices().unwrap(), 1);
    let context = context(&net);
    net.finalize(context).unwrap();
    let foreign = Context::new(5u8);
    assert!(net.finalize(foreign).is_err());
}

#[test]
fn ipv6_loopback_works() {
    let net = SocketNet::new(IpAddr::V6(Ipv6Addr::LOCALHOST));
    let (mut send, mut recv) = pair(&net);
    let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let data = *b"over ::1";
    let mut buffer = [0u8; 8];
    // SAFETY: data and buffer live to the end of the test.
    let (mut sent, mut received) = unsafe {
        (
            net.isend(&mut send, data.as_ptr(), 8, 3, &registration).unwrap().unwrap(),
            net.irecv(&mut recv, &[RecvBuffer { data: buffer.as_mut_ptr(), len: 8, tag: 3 }], &[&registration]).unwrap().unwrap(),
        )
    };
    wait(&net, &mut sent);
    assert_eq!(wait(&net, &mut received), vec![8]);
    assert_eq!(&buffer, b"over ::1");
}

fn net_connect_error(handle: &[u8]) -> String {
    let net = SocketNet::new(LOOPBACK);
    let context = context(&net);
    net.connect(&context, 0, handle).expect_err("a bad handle is refused").to_string()
}
