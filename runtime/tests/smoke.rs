use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

#[test]
fn four_threads_all_reduce() {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    if std::env::var("SMOKE_NET").is_ok() { config.set("NCCL_SHM_DISABLE", "1").unwrap(); config.set("OXCCL_SOCKET_MAX_RECVS", "8").unwrap(); }
    let comms = Communicator::init_all(4, &config).unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let send: Vec<f32> = (0..100_000).map(|i| (c.rank() * 1000 + i % 1000) as f32).collect();
                let mut recv = vec![0f32; send.len()];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                for (i, x) in recv.iter().enumerate() {
                    assert_eq!(*x, (6000 + 4 * (i % 1000)) as f32, "element {i}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
