//! The plugin loader with real plugins of the ABI versions whose sizes were `int` (v6, v7,
//! v8), built from the project's own C source (tests/plugins/loopback.c) with the system
//! `cc`, and broken ones built from it: missing, exporting no version oxccl reads, leaving a
//! call NULL, failing `init`, failing `isend` midway, reporting nonsense. Each must load and
//! work, or fail with an error naming the plugin and the call.

use std::path::PathBuf;
use std::sync::Arc;

use oxccl_bootstrap::config::NetPlugins;
use oxccl_transports::net::plugin::{self, PluginNet};
use oxccl_transports::net::socket::SocketNet;
use oxccl_transports::net::{CommConfig, Context, MemoryKind, Net, RecvBuffer, RecvComm, Request, SendComm};
use oxccl_transports::Error;

/// The loopback plugin built with `flags` as `libnccl-net-<name>.so`.
fn plugin(name: &str, flags: &[&str]) -> PathBuf {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plugins/loopback.c");
    oxccl_testkit::c_library(concat!(env!("CARGO_TARGET_TMPDIR"), "/c-plugins"), source, &format!("libnccl-net-{name}.so"), flags)
}

fn load(name: &str, flags: &[&str]) -> Arc<PluginNet> {
    plugin::load(plugin(name, flags).to_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn load_error(name: &str, flags: &[&str]) -> String {
    plugin::load(plugin(name, flags).to_str().unwrap()).err().unwrap_or_else(|| panic!("{name} loaded")).to_string()
}

fn pair(net: &dyn Net) -> (Context, SendComm, RecvComm) {
    let context = net.init(1, &CommConfig::default()).unwrap();
    let (handle, mut listen) = net.listen(&context, 0).unwrap();
    let send = net.connect(&context, 0, &handle).unwrap().expect("the loopback plugin connects at once");
    let recv = net.accept(&mut listen).unwrap().expect("and accepts at once");
    net.close_listen(listen).unwrap();
    (context, send, recv)
}

/// Tests `request` until done (the loopback plugin completes at once once matched).
fn done(net: &dyn Net, request: &mut Request) -> Vec<usize> {
    net.test(request).unwrap().expect("a matched request is done")
}

#[test]
fn older_versions_move_data_in_grouped_receives() {
    for version in [6, 7, 8] {
        let net = load(&format!("loop-v{version}"), &[&format!("-DNET_VERSION={version}")]);
        assert_eq!((net.version(), net.name()), (version, "loopback"));
        let properties = net.properties(0).unwrap();
        assert_eq!((properties.name.as_str(), properties.max_recvs, properties.speed_mbps, properties.latency_us), ("loop0", 4, 100_000, 1.5));
        // What these versions cannot say gets NCCL's defaults.
        assert_eq!((properties.max_p2p_bytes, properties.force_flush), (1 << 30, false));
        let (context, mut send, mut recv) = pair(net.as_ref());
        let memory = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
        let messages: Vec<Vec<u8>> = (0..4).map(|m| vec![m as u8 + 1; 1000 * m + 1]).collect();
        let mut sends: Vec<Request> = (0..4)
            // SAFETY: messages outlive the requests, tested below.
            .map(|m| unsafe { net.isend(&mut send, messages[m].as_ptr(), messages[m].len(), m as u32, &memory) }.unwrap().unwrap())
            .collect();
        let mut buffers = vec![vec![0u8; 4000]; 4];
        let posted: Vec<RecvBuffer> = buffers.iter_mut().enumerate().rev().map(|(i, b)| RecvBuffer { data: b.as_mut_ptr(), len: b.len(), tag: i as u32 }).collect();
        // SAFETY: buffers outlive the request, tested below.
        let mut received = unsafe { net.irecv(&mut recv, &posted, &[&memory; 4]) }.unwrap().unwrap();
        assert_eq!(done(net.as_ref(), &mut received), vec![3001, 2001, 1001, 1], "v{version}: sizes in posted order");
        assert_eq!(net.test(&mut received).unwrap(), Some(vec![3001, 2001, 1001, 1]), "asking again answers the same");
        for (m, request) in sends.iter_mut().enumerate() {
            assert_eq!(done(net.as_ref(), request), vec![messages[m].len()]);
            assert!(buffers[m][..messages[m].len()] == messages[m][..], "v{version}: message {m}");
        }
        net.dereg_mr(&mut send, memory).unwrap();
        net.close_send(send).unwrap();
        net.close_recv(recv).unwrap();
        net.finalize(context).unwrap();
    }
}

#[test]
fn limits_of_the_older_versions_hold() {
    let v6 = load("loop-v6", &["-DNET_VERSION=6"]);
    let (_context, mut send, mut recv) = pair(v6.as_ref());
    let memory = v6.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffer = [0u8; 4];
    let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: 4, tag: 0 }];
    // v6 promised 8 requests in flight per comm: the ninth must wait.
    let posted_ok: Vec<Option<Request>> = (0..9)
        // SAFETY: nothing is sent, so nothing is written; the comm outlives the requests.
        .map(|_| unsafe { v6.irecv(&mut recv, &posted, &[&memory]) }.unwrap())
        .collect();
    assert_eq!(posted_ok.iter().filter(|r| r.is_some()).count(), 8);
    assert!(posted_ok[8].is_none());
    // Sizes were int: a message of 2 GiB cannot be expressed, and is refused before any
    // byte is read.
    let send_memory = v6.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    // SAFETY: refused before the (absent) bytes are touched.
    let err = unsafe { v6.isend(&mut send, buffer.as_ptr(), 1 << 31, 0, &send_memory) }.unwrap_err().to_string();
    assert!(err.contains("isend") && err.contains("2147483648 bytes"), "{err}");
    // More buffers than maxRecvs is the caller's error.
    // SAFETY: refused before any buffer is touched.
    assert!(unsafe { v6.irecv(&mut recv, &[posted[0]; 5], &[&memory; 5]) }.is_err());
}

#[test]
fn a_missing_plugin_names_every_file_tried() {
    let err = plugin::load("nosuchfabric").err().unwrap().to_string();
    assert!(err.contains("nosuchfabric: dlopen") && err.contains("libnccl-net-nosuchfabric.so"), "{err}");
    let missing = NetPlugins::Named(vec!["/nonexistent/libnccl-net-x.so".into()]);
    let err = oxccl_transports::net::open(&missing, None, vec![]).err().unwrap().to_string();
    assert!(err.contains("/nonexistent/libnccl-net-x.so") && err.contains("No such file"), "{err}");
}

#[test]
fn a_library_without_a_known_version_or_with_null_calls_is_refused() {
    let err = load_error("novtable", &["-DNO_VTABLE"]);
    assert!(err.contains("symbol lookup") && err.contains("exports none of ncclNetPlugin_v6 to ncclNetPlugin_v12"), "{err}");
    let err = load_error("v5", &["-DNET_VERSION=6", "-DSYMBOL=ncclNetPlugin_v5"]);
    assert!(err.contains("libnccl-net-v5.so") && err.contains("exports ncclNetPlugin_v5 but not"), "{err}");
    let err = load_error("nullisend", &["-DNULL_ISEND"]);
    assert!(err.contains("ncclNetPlugin_v8: it leaves isend NULL"), "{err}");
}

#[test]
fn a_failing_init_is_an_error_and_never_falls_back_silently() {
    let path = plugin("failinit", &["-DFAIL_INIT"]);
    let net = plugin::load(path.to_str().unwrap()).unwrap();
    for _ in 0..2 {
        // Before v11 init runs once; its outcome is the answer ever after.
        let err = net.init(1, &CommConfig::default()).unwrap_err().to_string();
        assert!(err.contains("libnccl-net-failinit.so (v8, \"loopback\")") && err.contains("init: returned ncclSystemError (2)"), "{err}");
    }
    let socket: Arc<dyn Net> = Arc::new(SocketNet::new(std::net::Ipv4Addr::LOCALHOST.into()));
    let err = oxccl_transports::net::open(&NetPlugins::Named(vec![path.to_str().unwrap().into()]), None, vec![socket.clone()]).err().unwrap().to_string();
    assert!(err.contains("init: returned ncclSystemError"), "{err}");
    // A working plugin later in the list is used; the failure is logged.
    let working = plugin("loop-v8", &["-DNET_VERSION=8"]);
    let list = NetPlugins::Named(vec![path.to_str().unwrap().into(), working.to_str().unwrap().into()]);
    assert_eq!(oxccl_transports::net::open(&list, None, vec![socket.clone()]).unwrap().name(), "loopback");
    // NCCL_NET names the internal net: the plugin is passed over.
    let only_working = NetPlugins::Named(vec![working.to_str().unwrap().into()]);
    assert_eq!(oxccl_transports::net::open(&only_working, Some("Socket"), vec![socket]).unwrap().name(), "Socket");
}

#[test]
fn a_failing_isend_and_nonsense_sizes_are_errors_naming_the_call() {
    let net = load("failisend", &["-DFAIL_ISEND_AFTER=2"]);
    let (_context, mut send, _recv) = pair(net.as_ref());
    let memory = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let data = [7u8; 16];
    // SAFETY: data outlives the requests (dropped at the end of the test, after them).
    let outcomes: Vec<_> = (0..3).map(|tag| unsafe { net.isend(&mut send, data.as_ptr(), 16, tag, &memory) }).collect();
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok());
    let err = outcomes[2].as_ref().unwrap_err();
    assert!(matches!(err, Error::Plugin { call, .. } if call == "isend"), "{err}");
    assert!(err.to_string().contains("returned ncclSystemError (2)"), "{err}");

    let net = load("overreport", &["-DOVERREPORT"]);
    let (_context, mut send, mut recv) = pair(net.as_ref());
    let memory = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let mut buffer = [0u8; 16];
    // SAFETY: data and buffer outlive the requests.
    let (_sent, mut received) = unsafe {
        (net.isend(&mut send, data.as_ptr(), 16, 0, &memory).unwrap(), net.irecv(&mut recv, &[RecvBuffer { data: buffer.as_mut_ptr(), len: 16, tag: 0 }], &[&memory]).unwrap().unwrap())
    };
    let err = net.test(&mut received).unwrap_err().to_string();
    assert!(err.contains("test: it reports 1016 bytes received into buffer 0 of 16 bytes"), "{err}");
    assert!(net.test(&mut received).unwrap_err().to_string().contains("failed before"), "the plugin is not asked about a request it dropped");

    let err = load("badspeed", &["-DBAD_SPEED"]).properties(0).unwrap_err().to_string();
    assert!(err.contains("getProperties(0): speed is -1, a negative count"), "{err}");
}

#[test]
fn a_request_that_never_completes_stays_pending() {
    let net = load("nevercomplete", &["-DNEVER_COMPLETE"]);
    let (_context, mut send, mut recv) = pair(net.as_ref());
    let memory = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let (data, mut buffer) = ([1u8; 8], [0u8; 8]);
    // SAFETY: data and buffer outlive the requests.
    let mut received = unsafe {
        net.isend(&mut send, data.as_ptr(), 8, 0, &memory).unwrap();
        net.irecv(&mut recv, &[RecvBuffer { data: buffer.as_mut_ptr(), len: 8, tag: 0 }], &[&memory]).unwrap().unwrap()
    };
    // The loader never blocks: the caller's own deadline or abort flag ends the wait (the
    // runtime's proxy does; runtime/tests/net_plugins.rs).
    for _ in 0..1000 {
        assert_eq!(net.test(&mut received).unwrap(), None);
    }
}

#[test]
fn the_plugins_log_lines_reach_oxccls_logs_formatted() {
    let logs = oxccl_testkit::CapturedLogs::default();
    // A library of its own: its init (the first, and only, before v11) runs in this test.
    let net = load("logging", &["-DNET_VERSION=7", "-DMAX_RECVS=3"]);
    logs.during(|| net.init(1, &CommConfig::default()).unwrap());
    assert!(logs.has("INFO", "oxccl::net", "NET/Plugin: loopback plugin v7 ready: 3 receives per irecv (/") && logs.has("INFO", "oxccl::net", "loopback.c:"), "{:#?}", logs.lines());
}

/// With NCCL_NET_PLUGIN unset, a libnccl-net.so on the library path that cannot be used (its
/// init fails here) is passed over with a warning, as NCCL passes it over: run in a child
/// process whose LD_LIBRARY_PATH has it.
#[test]
fn an_unusable_default_plugin_falls_back_with_a_warning() {
    if std::env::var("OXCCL_TEST_DEFAULT_PLUGIN").is_ok() {
        let logs = oxccl_testkit::CapturedLogs::default();
        let socket: Arc<dyn Net> = Arc::new(SocketNet::new(std::net::Ipv4Addr::LOCALHOST.into()));
        let net = logs.during(|| oxccl_transports::net::open(&NetPlugins::Default, None, vec![socket])).unwrap();
        assert_eq!(net.name(), "Socket");
        assert!(logs.has("WARN", "oxccl::net", "not using libnccl-net.so (NCCL_NET_PLUGIN is unset)") && logs.has("WARN", "oxccl::net", "init: returned ncclSystemError"), "{:#?}", logs.lines());
        return;
    }
    let library = oxccl_testkit::c_library(concat!(env!("CARGO_TARGET_TMPDIR"), "/c-plugins"), concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plugins/loopback.c"), "libnccl-net.so", &["-DFAIL_INIT"]);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args(["an_unusable_default_plugin_falls_back_with_a_warning", "--exact", "--nocapture", "--test-threads", "1"]);
    child.env("OXCCL_TEST_DEFAULT_PLUGIN", "1").env("LD_LIBRARY_PATH", library.parent().unwrap());
    let output = oxccl_testkit::run(child, std::time::Duration::from_secs(60));
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
}
