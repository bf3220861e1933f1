//! What the plugin's tests share: the library under the name NCCL looks for, and a
//! connected pair of comms.

#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use oxccl_transports::net::{CommConfig, Context, Net, RecvComm, Request, SendComm};

/// libnccl-net-oxccl.so: cargo's libnccl_net_oxccl.so (built with this test, next to it)
/// copied under the name `NCCL_NET_PLUGIN=oxccl` makes NCCL look for, in a directory of
/// the tests (under cargo's directory for test files). The plugin's devices are
/// loopback (NCCL_SOCKET_IFNAME=lo, set here before anything in this process loads it).
pub fn library() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
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
