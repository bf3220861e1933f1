//! Tuner plugins: the project's own C tuner (tests/plugin/rules_tuner.c), built here for
//! every ABI version NCCL 2.28-2.30 read, changes oxccl's choices; bad plugins are errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use oxccl_topology::layout::ChannelBounds;
use oxccl_topology::search::SearchSettings;
use oxccl_topology::{PathSettings, System, Topology, XmlNode};
use oxccl_tuning::plugin::{self, InitInfo, NvlDomains, TunerPlugin};
use oxccl_tuning::{gpu_setup, Algorithm, Collective, Constants, CostTable, HostModel, Model, NcclModel, OneHostModel, Protocol, Request, Selection, Tuner};

/// The plugin reads NCCL_TUNER_CONFIG_FILE in init: one test at a time touches the environment.
static ENV: Mutex<()> = Mutex::new(());

fn build(name: &str, defines: &[&str], source: &Path) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tuner-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("libnccl-tuner-{name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc).args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"]).arg(&out).args(defines).arg(source).status().expect("a C compiler (cc) builds the test plugin");
    assert!(status.success(), "{cc} failed on {}", source.display());
    out
}

fn rules_plugin(abi: u32, extra: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugin/rules_tuner.c");
    let define = format!("-DTUNER_ABI={abi}");
    let mut defines = vec![define.as_str()];
    defines.extend_from_slice(extra);
    let name = format!("rules{abi}{}", extra.iter().map(|d| d.trim_start_matches("-D").to_ascii_lowercase()).collect::<String>());
    build(&name, &defines, &source)
}

fn rules_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.conf"));
    std::fs::write(&path, text).unwrap();
    path
}

const INFO: InitInfo = InitInfo { comm_id: 7, nranks: 2, nnodes: 2, nvl_domains: NvlDomains { count: 2, min_ranks: 1, max_ranks: 1 } };

/// NCCL's model of the one-H200 two-host run (tests/nccl_model.rs checks it against NCCL's own table).
fn nccl_model(constants: &Constants) -> NcclModel {
    let xml = XmlNode::parse(include_str!("../../topology/tests/fixtures/nccl-2.28-h200x1.xml"), None).unwrap();
    let topology = Topology::new(System::from_xml(&xml).unwrap(), PathSettings::default()).unwrap();
    NcclModel::new(gpu_setup(&topology, 2, 2, &SearchSettings::default(), ChannelBounds::default()).unwrap().input, constants)
}

fn any_pair(_: Collective, a: Algorithm, _: Protocol) -> bool {
    matches!(a, Algorithm::Tree | Algorithm::Ring | Algorithm::Pat)
}

fn gpu_tuner(plugin_path: Option<&Path>, rules: &Path) -> Tuner {
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", rules) };
    let mut constants = Constants::default();
    let plugin = plugin_path.map(|p| plugin::load(Some(p.to_str().unwrap()), &INFO, &mut constants).unwrap().expect("loaded"));
    Tuner::new(Selection::default(), Model::Nccl(Box::new(nccl_model(&constants))), any_pair, plugin)
}

const RULES: &str = "# small all_reduce on the tree, 3 channels; large on Ring/LL\nallreduce,0,65536,tree,simple,3,-1\nallreduce,65537,1099511627776,ring,ll,-1,2\nbroadcast,0,1099511627776,ring,simple,-1,4\n";

#[test]
fn every_abi_version_changes_the_choice() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let rules = rules_file("rules", RULES);
    let plain = gpu_tuner(None, &rules);
    let choose = |t: &Tuner, c, bytes| {
        let choice = t.choose(&Request::new(c, bytes)).unwrap();
        (choice.algorithm, choice.protocol, choice.channels)
    };
    // NCCL's own choices on this machine: Ring/LL small, Ring/Simple large.
    assert_eq!(choose(&plain, Collective::AllReduce, 8), (Algorithm::Ring, Protocol::Ll, None));
    assert_eq!(choose(&plain, Collective::AllReduce, 64 << 20), (Algorithm::Ring, Protocol::Simple, None));
    for abi in 2..=6 {
        let tuned = gpu_tuner(Some(&rules_plugin(abi, &[])), &rules);
        assert_eq!(tuned.plugin_name(), Some("rules"));
        assert_eq!(choose(&tuned, Collective::AllReduce, 8), (Algorithm::Tree, Protocol::Simple, Some(3)), "v{abi}");
        assert_eq!(choose(&tuned, Collective::AllReduce, 64 << 20), (Algorithm::Ring, Protocol::Ll, None), "v{abi}");
        // The broadcast rule asks for 4 ranks: this communicator has 2, so NCCL's choice stands.
        assert_eq!(choose(&tuned, Collective::Broadcast, 8), (Algorithm::Ring, Protocol::Ll, None), "v{abi}");
    }
}

#[test]
fn v5_and_v6_edit_the_models_constants_and_are_finalized() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tuner-calls.log");
    let _ = std::fs::remove_file(&log);
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("TUNER_TEST_LOG", &log) };
    let rules = rules_file("constants", "constant,base_latency,ring,ll,1000\n");
    for abi in [5, 6] {
        let tuner = gpu_tuner(Some(&rules_plugin(abi, &[])), &rules);
        // Ring/LL now starts at 1 ms: the small all_reduce goes Tree/LL (16.8 µs) instead.
        let choice = tuner.choose(&Request::new(Collective::AllReduce, 8)).unwrap();
        assert_eq!((choice.algorithm, choice.protocol), (Algorithm::Tree, Protocol::Ll), "v{abi}");
        drop(tuner);
    }
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "init\nfinalize\ninit\nfinalize\n");
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::remove_var("TUNER_TEST_LOG") };
}

/// The rules plugin (ABI v5) with `rules` in its file (`name`.conf), its `init` run for 4
/// ranks on one host; the caller holds ENV (the plugin reads NCCL_TUNER_CONFIG_FILE there).
fn rules_for_four_ranks(name: &str, rules: &str) -> Option<Box<dyn TunerPlugin>> {
    let file = rules_file(name, rules);
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", &file) };
    let info = InitInfo { nranks: 4, nnodes: 1, ..INFO };
    let plugin = plugin::load(Some(rules_plugin(5, &[]).to_str().unwrap()), &info, &mut Constants::default()).unwrap();
    assert!(plugin.is_some(), "the rules plugin loads");
    plugin
}

#[test]
fn the_host_path_takes_the_plugins_choice_where_it_can_run() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let rules = "allreduce,0,1099511627776,tree,simple,-1,-1\nbroadcast,0,1099511627776,tree,ll,-1,-1\n";
    let host = HostModel { nranks: 4, net: false, oversubscribed: false, per_host: 1 };
    let plain = Tuner::new(Selection::default(), Model::Host(host), HostModel::runs, None);
    let tuned = Tuner::new(Selection::default(), Model::Host(host), HostModel::runs, rules_for_four_ranks("host", rules));
    let big = Request::new(Collective::AllReduce, 64 << 20);
    assert_eq!(plain.choose(&big).unwrap().algorithm, Algorithm::Ring);
    assert_eq!(tuned.choose(&big).unwrap().algorithm, Algorithm::Tree);
    // Tree/LL cannot run on the host: its entry is -1, the plugin leaves it, the model's Ring stays.
    assert_eq!(tuned.choose(&Request::new(Collective::Broadcast, 64)).unwrap().algorithm, Algorithm::Ring);
    // NCCL_ALGO still rules over what the plugin sees: excluded entries are -1 to it.
    let forced = Tuner::new(Selection::parse(Some("allreduce:ring"), None).unwrap(), Model::Host(host), HostModel::runs, rules_for_four_ranks("host", rules));
    assert_eq!(forced.choose(&big).unwrap().algorithm, Algorithm::Ring);
}

/// GPU kernels on one host (OneHostModel): a rule that names the ring's other protocol
/// changes the table, and the choice is the plugin's, on its channels; a rule for another
/// collective, or one naming a pair the kernels cannot run there (its entry -1, which the
/// plugin leaves), edits nothing, so the runtime's own rules stand (`table_edited` false),
/// though the channels such a rule asks for are still asked.
#[test]
fn on_one_host_a_plugin_chooses_where_it_edits_the_table() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let model = Model::OneHost(OneHostModel { nranks: 4 });
    let plain = Tuner::new(Selection::default(), model.clone(), OneHostModel::runs, None);
    let tuned = Tuner::new(Selection::default(), model, OneHostModel::runs, rules_for_four_ranks("one-host", "allreduce,0,1099511627776,ring,simple,4,-1\nbroadcast,0,1099511627776,tree,simple,2,-1\n"));
    let small = Request::new(Collective::AllReduce, 64 << 10);
    let untouched = plain.choose(&small).unwrap();
    assert!(!untouched.table_edited);
    let chosen = tuned.choose(&small).unwrap();
    assert!(chosen.table_edited);
    assert_eq!((chosen.algorithm, chosen.protocol, chosen.channels), (Algorithm::Ring, Protocol::Simple, Some(4)));
    for (c, why, channels) in [(Collective::Broadcast, "Tree cannot run on one host", Some(2)), (Collective::AllGather, "no rule", None)] {
        let choice = tuned.choose(&Request::new(c, 64 << 10)).unwrap();
        assert!(!choice.table_edited, "{c:?}: {why}");
        assert_eq!(choice.table, plain.choose(&Request::new(c, 64 << 10)).unwrap().table, "{c:?}");
        assert_eq!(choice.channels, channels, "{c:?}");
    }
}

/// A Rust plugin that picks Tree/LL whatever the table says.
struct Stubborn;

impl TunerPlugin for Stubborn {
    fn name(&self) -> &str {
        "stubborn"
    }
    fn get_coll_info(&self, _: Collective, _: usize, _: usize, table: &mut CostTable, _: bool, _: &mut usize) -> oxccl_tuning::Result<()> {
        table.nccl_rows_mut()[Algorithm::Tree as usize][Protocol::Ll as usize] = 0.0;
        Ok(())
    }
}

#[test]
fn a_pair_that_cannot_run_is_an_error_never_replaced() {
    let host = HostModel { nranks: 4, net: false, oversubscribed: false, per_host: 1 };
    let tuner = Tuner::new(Selection::default(), Model::Host(host), HostModel::runs, Some(Box::new(Stubborn)));
    let err = tuner.choose(&Request::new(Collective::AllReduce, 64)).unwrap_err().to_string();
    assert!(err.contains("stubborn") && err.contains("Tree/LL") && err.contains("cannot run"), "{err}");
}

#[test]
fn bad_plugins_are_clear_errors() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let rules = rules_file("bad", RULES);
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", &rules) };
    let mut constants = Constants::default();
    let err = plugin::load(Some("nosuchtuner"), &INFO, &mut constants).err().unwrap().to_string();
    assert!(err.contains("NCCL_TUNER_PLUGIN=\"nosuchtuner\"") && err.contains("libnccl-tuner-nosuchtuner.so"), "{err}");
    let empty = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("empty.c");
    std::fs::write(&empty, "int not_a_tuner = 1;\n").unwrap();
    let lib = build("empty", &[], &empty);
    let err = plugin::load(Some(lib.to_str().unwrap()), &INFO, &mut constants).err().unwrap().to_string();
    assert!(err.contains("exports none of ncclTunerPlugin_v6"), "{err}");
    let err = plugin::load(Some(rules_plugin(5, &["-DFAIL_INIT"]).to_str().unwrap()), &INFO, &mut constants).err().unwrap().to_string();
    assert!(err.contains("rules") && err.contains("init failed"), "{err}");
    for abi in [2, 5] {
        let plugin = plugin::load(Some(rules_plugin(abi, &["-DFAIL_COLL"]).to_str().unwrap()), &INFO, &mut constants).unwrap();
        let tuner = Tuner::new(Selection::default(), Model::Nccl(Box::new(nccl_model(&constants))), any_pair, plugin);
        let err = tuner.choose(&Request::new(Collective::AllReduce, 8)).unwrap_err().to_string();
        assert!(err.contains("getCollInfo(AllReduce, 8 bytes)"), "v{abi}: {err}");
    }
    // A malformed rules file fails the plugin's init.
    let rules = rules_file("malformed", "allreduce,zero,8,ring\n");
    // SAFETY: (test) the environment is guarded by ENV: no other thread reads or writes it meanwhile.
    unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", &rules) };
    assert!(plugin::load(Some(rules_plugin(5, &[]).to_str().unwrap()), &INFO, &mut constants).is_err());
    assert!(plugin::load(Some("none"), &INFO, &mut constants).unwrap().is_none());
}
