//! libnccl-net-oxccl.so with NCCL_SOCKET_NTHREADS=20 and NCCL_NSOCKS_PERTHREAD=8 (set in
//! this test's own process before the plugin loads, as NCCL's users set them): the plugin
//! lowers them to NCCL's limits, 16 threads of 4 data sockets, warning through NCCL's
//! logger as NCCL does, and moves every size class over them in grouped receives.

mod common;

use common::{exchange, library};
use oxccl_testkit::CapturedLogs;
use oxccl_transports::net::plugin;
use oxccl_transports::net::Net;

#[test]
fn thread_and_socket_counts_beyond_nccls_limits_are_lowered_with_warnings() {
    std::env::set_var("NCCL_SOCKET_NTHREADS", "20");
    std::env::set_var("NCCL_NSOCKS_PERTHREAD", "8");
    let net = plugin::load_version(library().to_str().unwrap(), 12).unwrap();
    let logs = CapturedLogs::default();
    logs.during(|| {
        let context = net.init(1, &Default::default()).unwrap();
        net.finalize(context).unwrap();
    });
    for line in ["NCCL_SOCKET_NTHREADS=20 is more than 16: using 16", "NCCL_NSOCKS_PERTHREAD=8 is more than 64 sockets: using 4 per thread"] {
        assert!(logs.has("WARN", "oxccl::net", line), "{line}: {:#?}", logs.lines());
    }
    assert!(logs.lines().iter().any(|line| line.contains("16 helper thread(s) and 64 data socket(s) per connection")), "{:#?}", logs.lines());
    let sizes = [0, 1, 65535, 65536, 65537, 4 << 20, 3, (64 << 20) + 1, 100_000, 7];
    exchange(&net, &sizes);
}
