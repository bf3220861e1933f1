//! CUDA kernels: their sources (`kernels/cuda/*.cu`), NVRTC compilation specialised per
//! (datatype, op) with a disk cache, and, on a machine with a GPU, loading and launching.
//!
//! Nothing CUDA is needed to build: cudarc opens `libnvrtc` and `libcuda` at run time
//! (`dynamic-loading`), and [`Toolchain::find`] / [`Gpu::open`] probe for them first, so a
//! missing library is an error naming what is missing, never a panic. NVRTC finds the
//! CUDA headers under `$CUDA_HOME/include` (or `$CUDA_PATH`, `/usr/local/cuda`); the
//! `nvidia-cuda-nvrtc`, `-runtime`, `-cccl` and `-crt` wheels from PyPI provide both
//! the library and the headers on machines without a CUDA toolkit (scripts/test.sh
//! installs them and points `CUDA_HOME` and `LD_LIBRARY_PATH` at them).
//!
//! Compiled PTX is cached in `$XDG_CACHE_HOME/oxccl/kernels` (else `~/.cache/...`), keyed
//! by the source, the specialisation, the target architecture and the NVRTC version, so
//! a second run compiles nothing. Compile times are logged at INFO.

#![allow(unsafe_code)]

use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{self, CompileOptions, Ptx};

use crate::{Combine, DataType, Error, Result};

/// One kernel source file.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    pub name: &'static str,
    pub text: &'static str,
}

/// Every CUDA source of oxccl, in the order they are compiled together: the elementwise
/// reductions, then the executor that calls them.
pub const SOURCES: &[Source] = &[
    Source { name: "reduce.cu", text: include_str!("../cuda/reduce.cu") },
    Source { name: "collective.cu", text: include_str!("../cuda/collective.cu") },
];

/// The program NVRTC compiles: the layout header generated from the Rust types
/// ([`crate::device::header`]), then every source.
fn program() -> String {
    let mut text = crate::device::header();
    for source in SOURCES {
        text.push_str(&format!("\n// ---- {} ----\n", source.name));
        text.push_str(source.text);
    }
    text
}

/// The program's name in NVRTC's messages.
const PROGRAM: &str = "oxccl.cu";

/// What one compiled reduction kernel is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Specialization {
    pub dtype: DataType,
    pub op: Combine,
}

impl Specialization {
    /// Every (datatype, op) pair.
    pub fn all() -> impl Iterator<Item = Specialization> {
        DataType::ALL.into_iter().flat_map(|dtype| [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min].into_iter().map(move |op| Specialization { dtype, op }))
    }

    fn defines(&self) -> Vec<String> {
        let op = match self.op {
            Combine::Sum => 0,
            Combine::Prod => 1,
            Combine::Max => 2,
            Combine::Min => 3,
        };
        vec![format!("-DOX_DTYPE={}", self.dtype.to_nccl()), format!("-DOX_OP={op}")]
    }

    fn describe(&self) -> String {
        format!("{} {}", self.dtype.name(), self.op.name())
    }
}

/// The elementwise kernel: `(T* dst, const T* a, const T* b, u64 n)`.
pub const COMBINE_INTO: &str = "ox_combine_into";
/// The executor kernel: `(OxArgs)`, one block of [`THREADS`] threads per lane.
pub const RUN: &str = "ox_run";
/// The executor's LL entry: as [`RUN`], for plans whose steps all move over LL on some end
/// or copy locally ([`crate::device::ll_entry_fits`]); about half of [`RUN`]'s code.
pub const RUN_LL: &str = "ox_run_ll";
/// The direct (LL, one hop) kernel for small collectives: `(OxDirect)`, blocks of
/// [`THREADS`] threads.
pub const DIRECT: &str = "ox_direct";
/// The point-to-point LL kernel for a group's small sends and receives: `(OxP2p)`, one
/// block of [`THREADS`] threads per lane.
pub const P2P: &str = "ox_p2p";
/// Integer Avg's last step: `(T* buf, u64 n, u64 divisor)`.
pub const DIVIDE: &str = "ox_divide";
/// Holds a stream until the host's part of a staged operation is done:
/// `(const volatile u64* done, volatile u64* reached, u64 target, OxWatch watch, u32 rank)`,
/// one thread.
pub const WAIT_HOST: &str = "ox_wait_host";
/// Threads per block of [`RUN`].
pub const THREADS: u32 = 512;

/// NVRTC and the CUDA headers, found.
#[derive(Clone, Debug)]
pub struct Toolchain {
    include_dirs: Vec<PathBuf>,
    nvrtc_version: (i32, i32),
    cache_dir: Option<PathBuf>,
}

/// PTX for one specialisation.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub ptx: String,
    /// Whether it came from the disk cache.
    pub cached: bool,
}

impl Toolchain {
    /// Finds libnvrtc and the CUDA headers; an error says which is missing and how to
    /// provide it.
    pub fn find() -> Result<Toolchain> {
        if !nvrtc_present() {
            return Err(Error::Cuda(
                "libnvrtc not found: install the CUDA toolkit or `pip install nvidia-cuda-nvrtc` and put its lib/ directory on LD_LIBRARY_PATH".into(),
            ));
        }
        let nvrtc_version = nvrtc_version()?;
        let include_dirs = header_dirs();
        if include_dirs.is_empty() {
            return Err(Error::Cuda(
                "CUDA headers (cuda_fp16.h) not found: set CUDA_HOME to a directory with include/cuda_fp16.h (a CUDA toolkit, or the nvidia-cuda-runtime wheel's nvidia/cu13)".into(),
            ));
        }
        Ok(Toolchain { include_dirs, nvrtc_version, cache_dir: cache_dir() })
    }

    /// NVRTC's version (major, minor).
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc_version
    }

    /// Compiles the kernels for `spec` and `arch` (e.g. "sm_90"), or takes them from the
    /// disk cache.
    pub fn compile(&self, spec: Specialization, arch: &'static str) -> Result<Compiled> {
        let defines = spec.defines();
        let text = program();
        let key = cache_key(&text, &defines, arch, self.nvrtc_version);
        let path = self.cache_dir.as_ref().map(|d| d.join(format!("oxccl-{arch}-{key:016x}.ptx")));
        if let Some(ptx) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
            return Ok(Compiled { ptx, cached: true });
        }
        let start = Instant::now();
        let mut options = defines;
        options.push("--std=c++17".into());
        let opts = CompileOptions {
            arch: Some(arch),
            include_paths: self.include_dirs.iter().map(|d| d.display().to_string()).collect(),
            options,
            name: Some(PROGRAM.into()),
            ..Default::default()
        };
        let ptx = nvrtc::compile_ptx_with_opts(&text, opts).map_err(|e| Error::Cuda(format!("NVRTC compiling the kernels for {} ({arch}): {e}", spec.describe())))?;
        let ptx = ptx.to_src();
        tracing::info!(target: "oxccl::init", "compiled the kernels for {} ({arch}) in {:.0} ms", spec.describe(), start.elapsed().as_secs_f64() * 1e3);
        if let Some(path) = &path {
            store(path, &ptx);
        }
        Ok(Compiled { ptx, cached: false })
    }
}

/// Writes a cache entry atomically (a temporary file renamed into place); a failure only
/// costs a recompilation next time.
fn store(path: &Path, ptx: &str) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(".{}.{}", std::process::id(), path.file_name().and_then(|n| n.to_str()).unwrap_or("ptx")));
    if std::fs::write(&tmp, ptx).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn cache_key(text: &str, defines: &[String], arch: &str, nvrtc: (i32, i32)) -> u64 {
    // FNV-1a: stable across Rust versions and runs, unlike std's DefaultHasher.
    let mut h = fnv::FnvHasher::default();
    h.write(text.as_bytes());
    for d in defines {
        h.write(d.as_bytes());
        h.write_u8(0);
    }
    h.write(arch.as_bytes());
    h.write_i32(nvrtc.0);
    h.write_i32(nvrtc.1);
    h.finish()
}

fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("oxccl").join("kernels"))
}

/// Directories holding cuda_fp16.h (and cccl's headers when they are apart).
fn header_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| std::env::var_os(v)).map(PathBuf::from).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    for root in roots {
        let include = root.join("include");
        if include.join("cuda_fp16.h").is_file() {
            let mut dirs = vec![include.clone()];
            // The cccl wheel puts <cuda/std/...> under include/cccl.
            if include.join("cccl").is_dir() {
                dirs.push(include.join("cccl"));
            }
            return dirs;
        }
    }
    Vec::new()
}

fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through the pointers it is given; the library
    // was found by `nvrtc_present`.
    let status = unsafe { nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    status.result().map_err(|e| Error::Cuda(format!("asking NVRTC its version: {e:?}")))?;
    Ok((major, minor))
}

fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn driver_present() -> bool {
    // SAFETY: as above, for libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// A GPU with the reduction kernels loaded on first use, for running and checking them.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    toolchain: Toolchain,
    loaded: std::sync::Mutex<std::collections::HashMap<Specialization, (Arc<CudaModule>, CudaFunction)>>,
}

impl Gpu {
    /// Opens GPU `ordinal`; an error when there is no driver or no such GPU.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if !driver_present() {
            return Err(Error::Cuda("libcuda (the NVIDIA driver) not found: this machine has no usable GPU".into()));
        }
        let toolchain = Toolchain::find()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Cuda(format!("opening GPU {ordinal}: {e:?}")))?;
        let (major, minor) = ctx.compute_capability().map_err(|e| Error::Cuda(format!("asking GPU {ordinal} its compute capability: {e:?}")))?;
        let arch = arch_name(major, minor)?;
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, arch, toolchain, loaded: Default::default() })
    }

    /// The architecture kernels are compiled for, e.g. "sm_90".
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The device's name.
    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown GPU".into())
    }

    fn function(&self, spec: Specialization) -> Result<CudaFunction> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, f)) = loaded.get(&spec) {
            return Ok(f.clone());
        }
        let compiled = self.toolchain.compile(spec, self.arch)?;
        let module = self.ctx.load_module(Ptx::from_src(compiled.ptx)).map_err(|e| Error::Cuda(format!("loading the {} kernel: {e:?}", spec.describe())))?;
        let f = module.load_function(COMBINE_INTO).map_err(|e| Error::Cuda(format!("finding {COMBINE_INTO}: {e:?}")))?;
        loaded.insert(spec, (module, f.clone()));
        Ok(f)
    }

    /// `a (op) b` elementwise on the GPU, for host buffers of `dtype` elements: copies
    /// both in, runs the kernel, copies the result out. For tests and checks; the CUDA
    /// executor runs the same kernel on device buffers.
    pub fn combine_into(&self, dtype: DataType, op: Combine, a: &[u8], b: &[u8]) -> Result<Vec<u8>> {
        if a.len() != b.len() {
            return Err(Error::LengthMismatch { dst: a.len(), src: b.len() });
        }
        let n = dtype.check_len(a.len())?;
        let f = self.function(Specialization { dtype, op })?;
        fn cuda(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
            move |e| Error::Cuda(format!("{what}: {e:?}"))
        }
        let da = self.stream.clone_htod(a).map_err(cuda("copying an input to the GPU"))?;
        let db = self.stream.clone_htod(b).map_err(cuda("copying an input to the GPU"))?;
        let mut out = self.stream.alloc_zeros::<u8>(a.len().max(1)).map_err(cuda("allocating the output"))?;
        if n > 0 {
            let threads = 256u32;
            let blocks = (n as u64).div_ceil(threads as u64).clamp(1, 65_535) as u32;
            let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
            let count = n as u64;
            let mut launch = self.stream.launch_builder(&f);
            launch.arg(&mut out).arg(&da).arg(&db).arg(&count);
            // SAFETY: the kernel's signature is (T*, const T*, const T*, u64) and the three
            // buffers hold n elements of the type it was compiled for.
            unsafe { launch.launch(cfg) }.map_err(cuda("launching the reduction kernel"))?;
        }
        let mut host = self.stream.clone_dtoh(&out).map_err(cuda("copying the result back"))?;
        host.truncate(a.len());
        Ok(host)
    }
}

/// "sm_XY" for a compute capability (NVRTC's --gpu-architecture wants a static string).
pub fn arch_name(major: i32, minor: i32) -> Result<&'static str> {
    Ok(match (major, minor) {
        (7, 0) => "sm_70",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        _ => return Err(Error::Cuda(format!("compute capability {major}.{minor} is not one oxccl compiles for"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specialisations_cover_every_pair_once() {
        let all: Vec<_> = Specialization::all().collect();
        assert_eq!(all.len(), 48);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 48);
    }

    #[test]
    fn cache_keys_change_with_every_input() {
        let d = Specialization { dtype: DataType::Float32, op: Combine::Sum }.defines();
        let text = program();
        let k = cache_key(&text, &d, "sm_90", (13, 0));
        assert_ne!(k, cache_key(&text, &d, "sm_80", (13, 0)));
        assert_ne!(k, cache_key(&text, &d, "sm_90", (13, 1)));
        assert_ne!(k, cache_key(&text, &Specialization { dtype: DataType::Float32, op: Combine::Max }.defines(), "sm_90", (13, 0)));
        assert_ne!(k, cache_key(&format!("{text} "), &d, "sm_90", (13, 0)));
        assert_eq!(k, cache_key(&text, &d, "sm_90", (13, 0)));
    }
}
