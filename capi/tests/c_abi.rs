//! The C ABI as C and Fortran programs meet it: oxccl's nccl.h compiles without CUDA, a C
//! program written for NCCL builds against it, links to libnccl.so.2 and runs under mpirun
//! on host memory; every declared function is exported (and its pncclX alias) and has a
//! Fortran interface; a Fortran program runs under mpirun.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{library_dir, mpirun, root, run};

#[test]
fn the_header_compiles_without_cuda_in_c_and_cpp() {
    for (compiler, ext) in [("cc", "c"), ("c++", "cpp")] {
        let dir = std::env::temp_dir().join(format!("oxccl-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join(format!("h.{ext}"));
        std::fs::write(&src, "#include <nccl.h>\nint main(void) { ncclConfig_t c = NCCL_CONFIG_INITIALIZER; ncclUniqueId id; return (int)(sizeof id + c.size) == 0; }\n").unwrap();
        let out = Command::new(compiler).arg("-Wall").arg("-Werror").arg("-I").arg(root().join("capi/include")).arg(&src).arg("-o").arg(dir.join("h")).output().unwrap();
        assert!(out.status.success(), "{compiler}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn every_declared_function_and_its_alias_is_exported() {
    let header = std::fs::read_to_string(root().join("capi/include/nccl.h")).unwrap();
    let declared: Vec<String> = header
        .lines()
        .filter(|l| l.starts_with("ncclResult_t ") || l.starts_with("const char* "))
        .filter_map(|l| l.split('(').next()?.split_whitespace().last().map(|s| s.trim_start_matches('*').to_string()))
        .collect();
    assert!(declared.len() > 60, "{declared:?}");
    let lib = library_dir().join("libnccl.so.2");
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(&lib).output().unwrap();
    let symbols = String::from_utf8_lossy(&out.stdout);
    for name in &declared {
        assert!(symbols.lines().any(|l| l.ends_with(&format!(" T {name}"))), "{name} is declared in nccl.h but not exported");
    }
    let soname = Command::new("readelf").arg("-d").arg(&lib).output().unwrap();
    assert!(String::from_utf8_lossy(&soname.stdout).contains("Library soname: [libnccl.so.2]"));
}

#[test]
fn a_c_program_written_for_nccl_runs_under_mpirun() {
    let libs = library_dir();
    let exe = libs.join("allreduce_c");
    let out = Command::new("mpicc")
        .arg("-Wall")
        .arg("-I")
        .arg(root().join("capi/include"))
        .arg(root().join("examples/c/allreduce.c"))
        .arg(format!("-L{}", libs.display()))
        .arg("-lnccl")
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("mpicc is missing: scripts/install-deps.sh installs Open MPI");
    assert!(out.status.success(), "mpicc: {}", String::from_utf8_lossy(&out.stderr));
    let out = run(mpirun(4, &exe), Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for r in 0..4 {
        assert!(stdout.contains(&format!("rank {r} of 4: ok (oxccl as NCCL 22803)")), "{stdout}");
    }
}

#[test]
fn every_c_function_has_a_fortran_interface() {
    let header = std::fs::read_to_string(root().join("capi/include/nccl.h")).unwrap();
    let module = std::fs::read_to_string(root().join("capi/include/nccl.f90")).unwrap();
    let declared: Vec<String> = header
        .lines()
        .filter(|l| l.starts_with("ncclResult_t nccl") || l.starts_with("const char* nccl"))
        .filter_map(|l| l.split('(').next()?.split_whitespace().last().map(String::from))
        .collect();
    assert!(declared.len() > 30);
    for name in declared {
        assert!(module.contains(&format!("bind(c, name=\"{name}\")")), "{name} has no Fortran interface in nccl.f90");
    }
}

#[test]
fn a_fortran_program_runs_under_mpirun() {
    let libs = library_dir();
    let build = libs.join("fortran");
    std::fs::create_dir_all(&build).unwrap();
    let exe = build.join("allreduce_f");
    let out = Command::new("mpifort")
        .arg("-std=f2008")
        .arg("-J")
        .arg(&build)
        .arg(root().join("capi/include/nccl.f90"))
        .arg(root().join("examples/fortran/allreduce.f90"))
        .arg(format!("-L{}", libs.display()))
        .arg("-lnccl")
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("mpifort is missing: scripts/install-deps.sh installs Open MPI and gfortran");
    assert!(out.status.success(), "mpifort: {}", String::from_utf8_lossy(&out.stderr));
    let out = run(mpirun(4, &exe), Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for r in 0..4 {
        assert!(stdout.contains(&format!("rank {r} of 4: ok (Fortran, oxccl as NCCL 22803)")), "{stdout}");
    }
}
