//! The host path's choice goes through oxccl-tuning: NCCL_ALGO/NCCL_PROTO, the host model,
//! a tuner plugin (the project's C tuner, built here); invalid pairs are errors; the
//! topology is dumped at init (NCCL_TOPO_DUMP_FILE), from NCCL_TOPO_FILE when given.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use oxccl_runtime::{bootstrap::Config, Collective, Communicator, DataType, ReduceOp};
use oxccl_tuning::{Algorithm, Protocol};

/// The plugin reads NCCL_TUNER_CONFIG_FILE in init: one test at a time touches the environment.
static ENV: Mutex<()> = Mutex::new(());

fn plugin(defines: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime-tuner");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("libnccl-tuner-rules{}.so", defines.concat().replace('-', "_")));
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tuning/tests/plugin/rules_tuner.c");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into())).args(["-shared", "-fPIC", "-O2", "-DTUNER_ABI=5", "-o"]).arg(&out).args(defines).arg(source).status().expect("cc builds the test plugin");
    assert!(status.success());
    out
}

fn config(settings: &[(&str, &str)]) -> Config {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    for (k, v) in settings {
        config.set(k, v).unwrap();
    }
    config
}

fn with_rules(rules: &str) -> std::sync::MutexGuard<'static, ()> {
    let guard = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("runtime-rules-{}.conf", std::process::id()));
    std::fs::write(&path, rules).unwrap();
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", &path) };
    guard
}

/// Every rank's all_reduce of 1 MiB of f32 agrees with the sum; the choice of rank 0.
fn all_reduce_and_choice(comms: Vec<Communicator>) -> (Algorithm, Protocol) {
    let count = 1 << 18;
    let choice = comms[0].tuning(Collective::AllReduce, count, DataType::Float32).unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let send = vec![c.rank() as f32 + 1.0; count];
                let mut recv = vec![0f32; count];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                assert!(recv.iter().all(|&x| x == 10.0));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    (choice.algorithm, choice.protocol)
}

#[test]
fn a_tuner_plugin_steers_the_host_path_and_nccl_algo_still_rules() {
    let _env = with_rules("allreduce,0,1099511627776,tree,simple,-1,4\n");
    let path = plugin(&[]);
    // The host model alone: the ring for 1 MiB in shared memory.
    let plain = Communicator::init_all(4, &config(&[("NCCL_TUNER_PLUGIN", "none")])).unwrap();
    assert_eq!(all_reduce_and_choice(plain), (Algorithm::Ring, Protocol::Simple));
    // The plugin's rule (all_reduce, any size, 4 ranks): the tree, and the result is right.
    let tuned = Communicator::init_all(4, &config(&[("NCCL_TUNER_PLUGIN", path.to_str().unwrap())])).unwrap();
    assert_eq!(all_reduce_and_choice(tuned), (Algorithm::Tree, Protocol::Simple));
    // NCCL_ALGO comes first: the plugin sees the tree's entry as -1 and cannot pick it.
    let forced = Communicator::init_all(4, &config(&[("NCCL_TUNER_PLUGIN", path.to_str().unwrap()), ("NCCL_ALGO", "allreduce:ring")])).unwrap();
    assert_eq!(all_reduce_and_choice(forced), (Algorithm::Ring, Protocol::Simple));
}

#[test]
fn invalid_pairs_and_bad_plugins_are_errors() {
    let _env = with_rules("allreduce,0,1099511627776,tree,simple,-1,-1\n");
    // The tree runs all_reduce only: a broadcast forced onto it fails, naming the variable.
    let comms = Communicator::init_all(2, &config(&[("NCCL_ALGO", "tree"), ("NCCL_TUNER_PLUGIN", "none")])).unwrap();
    let err = comms[0].tuning(Collective::Broadcast, 1024, DataType::Float32).unwrap_err().to_string();
    assert!(err.contains("NCCL_ALGO=\"tree\"") && err.contains("broadcast"), "{err}");
    // The host path has Simple only.
    let comms = Communicator::init_all(2, &config(&[("NCCL_PROTO", "LL"), ("NCCL_TUNER_PLUGIN", "none")])).unwrap();
    let err = comms[0].tuning(Collective::AllReduce, 1024, DataType::Float32).unwrap_err().to_string();
    assert!(err.contains("NCCL_PROTO=\"LL\"") && err.contains("simple"), "{err}");
    // A plugin whose getCollInfo fails fails the call; one that cannot be found fails the communicator.
    let failing = plugin(&["-DFAIL_COLL"]);
    let comms = Communicator::init_all(2, &config(&[("NCCL_TUNER_PLUGIN", failing.to_str().unwrap())])).unwrap();
    let err = comms[0].tuning(Collective::AllReduce, 1024, DataType::Float32).unwrap_err().to_string();
    assert!(err.contains("getCollInfo"), "{err}");
    let err = Communicator::init_all(2, &config(&[("NCCL_TUNER_PLUGIN", "/nonexistent/libnccl-tuner-x.so")])).err().unwrap().to_string();
    assert!(err.contains("NCCL_TUNER_PLUGIN"), "{err}");
}

#[test]
fn the_topology_is_dumped_at_init() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dump = dir.join(format!("topo-{}.xml", std::process::id()));
    let comms = Communicator::init_all(2, &config(&[("NCCL_TOPO_DUMP_FILE", dump.to_str().unwrap()), ("NCCL_TUNER_PLUGIN", "none")])).unwrap();
    drop(comms);
    let xml = oxccl_topology::XmlNode::load(&dump).unwrap();
    let nets: Vec<_> = xml.descendants().into_iter().filter(|n| n.name == "net").collect();
    assert_eq!(nets.len(), 1, "the socket Net: {}", xml.to_xml());
    // Named after the bootstrap's interface (loopback for ranks of one process).
    assert_eq!(nets[0].attr("name"), Some("lo"), "{}", xml.to_xml());
    // NCCL's own dump, loaded through NCCL_TOPO_FILE, is dumped back unchanged.
    let nccl = concat!(env!("CARGO_MANIFEST_DIR"), "/../topology/tests/fixtures/nccl-2.28-h200x1.xml");
    let comms = Communicator::init_all(2, &config(&[("NCCL_TOPO_FILE", nccl), ("NCCL_TOPO_DUMP_FILE", dump.to_str().unwrap()), ("NCCL_TUNER_PLUGIN", "none")])).unwrap();
    drop(comms);
    assert_eq!(std::fs::read_to_string(&dump).unwrap(), std::fs::read_to_string(nccl).unwrap());
    let _ = std::fs::remove_file(&dump);
}
