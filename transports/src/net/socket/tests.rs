use super::*;

fn pair(net: &SocketNet) -> (SendComm, RecvComm) {
    let (handle, mut listen) = net.listen(0).unwrap();
    let send = net.connect(0, &handle).unwrap().unwrap();
    let recv = loop {
        if let Some(r) = net.accept(&mut listen).unwrap() {
            break r;
        }
    };
    (send, recv)
}

fn wait(net: &SocketNet, request: &mut Request) -> Vec<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(sizes) = net.test(request).unwrap() {
            return sizes;
        }
        assert!(std::time::Instant::now() < deadline, "request never completed");
    }
}

fn exchange(max_recvs: usize, sizes: &[usize]) {
    let net = Arc::new(SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), max_recvs));
    let (mut send, mut recv) = pair(&net);
    let messages: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(m, &len)| (0..len).map(|i| (i * 13 + m) as u8).collect()).collect();
    let sender = {
        let (net, messages) = (net.clone(), messages.clone());
        std::thread::spawn(move || {
            let handle = Opaque::new(());
            for (m, msg) in messages.iter().enumerate() {
                // SAFETY: msg outlives the request, which is waited for below.
                let mut req = loop {
                    if let Some(r) = unsafe { net.isend(&mut send, msg.as_ptr(), msg.len(), m as u32, &handle) }.unwrap() {
                        break r;
                    }
                };
                wait(&net, &mut req);
            }
        })
    };
    let handle = Opaque::new(());
    let mut m = 0;
    while m < messages.len() {
        let group = max_recvs.min(messages.len() - m);
        let mut bufs: Vec<Vec<u8>> = (0..group).map(|i| vec![0u8; sizes[m + i] + 5]).collect();
        let descs: Vec<RecvBuffer> = bufs.iter_mut().enumerate().map(|(i, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: (m + i) as u32 }).collect();
        let handles: Vec<&MemoryHandle> = (0..group).map(|_| &handle).collect();
        // SAFETY: bufs outlive the request, which is waited for below.
        let mut req = unsafe { net.irecv(&mut recv, &descs, &handles) }.unwrap().unwrap();
        let got = wait(&net, &mut req);
        for i in 0..group {
            assert_eq!(got[i], sizes[m + i]);
            assert_eq!(&bufs[i][..got[i]], &messages[m + i][..], "message {}", m + i);
        }
        m += group;
    }
    sender.join().unwrap();
    let stats = net.stats();
    assert_eq!(stats.irecv_buffers.load(Ordering::Relaxed), sizes.len() as u64);
    if max_recvs > 1 && sizes.len() > 1 {
        assert!(stats.irecv_grouped.load(Ordering::Relaxed) > 0);
    } else {
        assert_eq!(stats.irecv_grouped.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn messages_of_many_sizes_with_one_and_eight_receives_per_call() {
    let sizes = [0, 1, 4097, 64 << 20, 3, 0, 100_000, 7, 8, 9];
    exchange(1, &sizes);
    exchange(8, &sizes);
}

#[test]
fn too_small_a_buffer_is_an_error_naming_both_sizes() {
    let net = SocketNet::new("127.0.0.1".parse().unwrap());
    let (mut send, mut recv) = pair(&net);
    let data = [1u8; 100];
    let h = Opaque::new(());
    // SAFETY: data lives to the end of the test.
    let mut s = unsafe { net.isend(&mut send, data.as_ptr(), 100, 0, &h) }.unwrap().unwrap();
    wait(&net, &mut s);
    let mut buf = [0u8; 10];
    // SAFETY: buf lives to the end of the test.
    let mut r = unsafe { net.irecv(&mut recv, &[RecvBuffer { data: buf.as_mut_ptr(), len: 10, tag: 0 }], &[&h]) }.unwrap().unwrap();
    let err = loop {
        match net.test(&mut r) {
            Err(e) => break e.to_string(),
            Ok(Some(_)) => panic!("completed"),
            Ok(None) => {}
        }
    };
    assert!(err.contains("100") && err.contains("10-byte"), "{err}");
}

#[test]
fn strangers_are_refused_and_properties_reported() {
    let net = SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), 8);
    assert_eq!(net.properties(0).unwrap().max_recvs, 8);
    assert!(net.properties(1).is_err());
    let (handle, mut listen) = net.listen(0).unwrap();
    let addr = std::str::from_utf8(&handle[8..]).unwrap().to_string();
    let mut stranger = TcpStream::connect(addr).unwrap();
    stranger.write_all(&[0u8; 8]).unwrap();
    let err = loop {
        match net.accept(&mut listen) {
            Err(e) => break e.to_string(),
            Ok(Some(_)) => panic!("stranger accepted"),
            Ok(None) => {}
        }
    };
    assert!(err.contains("wrong magic"), "{err}");
}
