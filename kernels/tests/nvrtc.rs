//! Every CUDA kernel compiles through NVRTC for sm_90 (the H100/H200 architecture), on a
//! machine without a GPU: NVRTC is a library (scripts/test.sh installs the PyPI wheel and
//! points CUDA_HOME and LD_LIBRARY_PATH at it). The second compilation of the same
//! specialisation comes from the disk cache.
#![cfg(feature = "cuda")]

use oxccl_kernels::cuda::{Specialization, Toolchain, COMBINE_INTO, DIRECT, DIVIDE, P2P, RUN, RUN_LL, WAIT_HOST};

#[test]
fn every_specialisation_compiles_for_sm_90_and_is_cached() {
    let cache = std::env::temp_dir().join(format!("oxccl-nvrtc-test-{}", std::process::id()));
    // This test binary has no other test that reads the variable.
    std::env::set_var("XDG_CACHE_HOME", &cache);
    let toolchain = Toolchain::find().unwrap_or_else(|e| panic!("{e} (scripts/test.sh installs NVRTC and the headers)"));
    eprintln!("NVRTC {:?}", toolchain.nvrtc_version());
    // On as many threads as the machine has cores (NVRTC compiles one program a thread):
    // one after another the specialisations took ~8 minutes on a 2-core VM.
    let specs: Vec<Specialization> = Specialization::all().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for part in specs.chunks(specs.len().div_ceil(threads)) {
            let toolchain = &toolchain;
            s.spawn(move || {
                for &spec in part {
                    let first = toolchain.compile(spec, "sm_90").unwrap();
                    assert!(!first.cached, "{spec:?}: a fresh cache cannot hold it");
                    assert!([COMBINE_INTO, RUN, RUN_LL, DIRECT, P2P, DIVIDE, WAIT_HOST].iter().all(|k| first.ptx.contains(k)) && first.ptx.contains(".target sm_90"), "{spec:?}: {}", &first.ptx[..first.ptx.len().min(400)]);
                    let second = toolchain.compile(spec, "sm_90").unwrap();
                    assert!(second.cached, "{spec:?}: not taken from the cache");
                    assert_eq!(first.ptx, second.ptx);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&cache);
}
