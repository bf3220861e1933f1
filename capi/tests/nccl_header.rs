//! ABI conformance with NCCL's own header (from the `nvidia-nccl-cu13` wheel, which
//! scripts/test.sh installs): a C program that references every function NCCL's nccl.h
//! declares links against oxccl's libnccl.so; and the sizes, offsets, enum values and
//! config initializer that a program compiled against NCCL's header passes in are the ones
//! oxccl's header gives.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{library_dir, root};

/// NCCL's include directory and the CUDA headers it needs, from the PyPI wheels.
fn nccl_headers() -> (PathBuf, Vec<PathBuf>) {
    let out = Command::new("python3")
        .args(["-c", "import importlib.util, pathlib\nspec = importlib.util.find_spec('nvidia')\nfor r in (spec.submodule_search_locations if spec else []):\n    p = pathlib.Path(r)\n    if (p / 'nccl/include/nccl.h').is_file():\n        print(p)\n        break"])
        .output()
        .expect("python3");
    let base = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(base.join("nccl/include/nccl.h").is_file(), "NCCL's header is missing: `pip install nvidia-nccl-cu13` (scripts/test.sh installs it)");
    let cuda: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path().join("include")))
        .filter(|p| p.join("cuda_runtime.h").is_file())
        .flat_map(|p| [p.join("cccl"), p])
        .collect();
    (base.join("nccl/include"), cuda)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxccl-abi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every function NCCL's header declares (and its pncclX alias).
fn declared_functions(header: &str) -> Vec<String> {
    let mut names: Vec<String> = header
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("ncclResult_t") || l.starts_with("const char*") || l.starts_with("void"))
        .filter_map(|l| {
            let before = l.split('(').next()?;
            let name = before.split_whitespace().last()?.trim_start_matches('*');
            (name.starts_with("nccl") || name.starts_with("pnccl")).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_program_using_every_function_of_ncclh_links_against_oxccl() {
    let (include, cuda) = nccl_headers();
    let header = std::fs::read_to_string(include.join("nccl.h")).unwrap();
    let names = declared_functions(&header);
    assert!(names.len() > 100, "{names:?}");
    let dir = scratch("link");
    let mut src = String::from("#include <nccl.h>\n#include <stdio.h>\nint main(void) {\n  void* fns[] = {\n");
    for n in &names {
        src.push_str(&format!("    (void*)&{n},\n"));
    }
    src.push_str("  };\n  printf(\"%zu\\n\", sizeof fns / sizeof fns[0]);\n  return 0;\n}\n");
    std::fs::write(dir.join("all.c"), src).unwrap();
    let mut cc = Command::new("cc");
    // NCCL_OS_LINUX: the Linux view of the header (ncclResetDebugInit is a function there).
    cc.arg("-w").arg("-DNCCL_OS_LINUX").arg("-I").arg(&include);
    for c in &cuda {
        cc.arg("-I").arg(c);
    }
    let libs = library_dir();
    let out = cc
        .arg(dir.join("all.c"))
        .arg(format!("-L{}", libs.display()))
        .arg("-lnccl")
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .arg("-o")
        .arg(dir.join("all"))
        .output()
        .unwrap();
    assert!(out.status.success(), "linking every function of NCCL's nccl.h against oxccl failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(dir.join("all")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), names.len().to_string());
}

/// Prints what a program compiled against a header hands the library.
const LAYOUT: &str = r#"
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>
#define P(x) printf(#x " %lld\n", (long long)(x))
int main(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  P(sizeof(ncclUniqueId)); P(sizeof(ncclComm_t)); P(sizeof(ncclResult_t)); P(sizeof(ncclDataType_t)); P(sizeof(ncclRedOp_t));
  P(offsetof(ncclConfig_t, size)); P(offsetof(ncclConfig_t, magic)); P(offsetof(ncclConfig_t, version));
  P(offsetof(ncclConfig_t, blocking)); P(offsetof(ncclConfig_t, cgaClusterSize)); P(offsetof(ncclConfig_t, minCTAs));
  P(offsetof(ncclConfig_t, maxCTAs)); P(offsetof(ncclConfig_t, netName)); P(offsetof(ncclConfig_t, splitShare));
  P(offsetof(ncclConfig_t, trafficClass)); P(offsetof(ncclConfig_t, commName)); P(offsetof(ncclConfig_t, collnetEnable));
  P(offsetof(ncclConfig_t, CTAPolicy)); P(offsetof(ncclConfig_t, shrinkShare)); P(offsetof(ncclConfig_t, nvlsCTAs));
  P(offsetof(ncclConfig_t, nChannelsPerNetPeer)); P(offsetof(ncclConfig_t, nvlinkCentricSched));
  P(c.magic); P(c.blocking); P(c.cgaClusterSize); P(c.netName == NULL); P(c.nvlinkCentricSched);
  P(ncclSuccess); P(ncclUnhandledCudaError); P(ncclSystemError); P(ncclInternalError); P(ncclInvalidArgument);
  P(ncclInvalidUsage); P(ncclRemoteError); P(ncclInProgress); P(ncclTimeout); P(ncclNumResults);
  P(ncclInt8); P(ncclChar); P(ncclUint8); P(ncclInt32); P(ncclInt); P(ncclUint32); P(ncclInt64); P(ncclUint64);
  P(ncclFloat16); P(ncclHalf); P(ncclFloat32); P(ncclFloat); P(ncclFloat64); P(ncclDouble); P(ncclBfloat16);
  P(ncclFloat8e4m3); P(ncclFloat8e5m2); P(ncclNumTypes);
  P(ncclSum); P(ncclProd); P(ncclMax); P(ncclMin); P(ncclAvg); P(ncclNumOps); P(ncclMaxRedOp);
  P(ncclScalarDevice); P(ncclScalarHostImmediate);
  P(NCCL_SPLIT_NOCOLOR); P(NCCL_CONFIG_UNDEF_INT); P(NCCL_SHRINK_DEFAULT); P(NCCL_SHRINK_ABORT); P(NCCL_REVOKE_DEFAULT);
  P(NCCL_SUSPEND_MEM); P(sizeof(ncclCommMemStat_t)); P(ncclStatGpuMemSuspend); P(ncclStatGpuMemSuspended);
  P(ncclStatGpuMemPersist); P(ncclStatGpuMemTotal);
  P(NCCL_VERSION(2, 28, 3)); P(NCCL_VERSION(2, 8, 4));
  return 0;
}
"#;

fn layout(includes: &[PathBuf], name: &str) -> String {
    let dir = scratch(name);
    std::fs::write(dir.join("layout.c"), LAYOUT).unwrap();
    let mut cc = Command::new("cc");
    cc.arg("-w");
    for i in includes {
        cc.arg("-I").arg(i);
    }
    let out = cc.arg(dir.join("layout.c")).arg("-o").arg(dir.join("layout")).output().unwrap();
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(Command::new(dir.join("layout")).output().unwrap().stdout).unwrap()
}

#[test]
fn sizes_offsets_enums_and_the_config_initializer_match_ncclh() {
    let (include, cuda) = nccl_headers();
    let theirs = layout(&[vec![include], cuda].concat(), "nccl");
    let ours = layout(&[root().join("capi/include")], "oxccl");
    for (t, o) in theirs.lines().zip(ours.lines()) {
        assert_eq!(t, o, "NCCL's header and oxccl's differ");
    }
    assert_eq!(theirs.lines().count(), ours.lines().count());
}
