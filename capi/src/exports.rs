//! The exported functions, with NCCL's names and signatures (capi/include/nccl.h).
//!
//! Each trusts its caller for what C cannot express: pointers are valid for what NCCL's
//! documentation says they point to, handles are ones this library returned and not yet
//! destroyed, buffers stay untouched until the call (or its group) returns. NULL pointers,
//! out-of-range values, unknown datatypes and ops and count overflows are checked and
//! refused; so is a non-NULL stream on a communicator of the host backend (on the GPU
//! backend the stream is the caller's CUDA stream, as with NCCL).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Once;

use oxccl_runtime::bootstrap::{Bootstrap, Config, UniqueId, UNIQUE_ID_BYTES};
use oxccl_runtime::{Collective, Communicator};

use crate::comm::{dtype, host_stream, index, NcclComm};
use oxccl_runtime::Memory;
use crate::group::{self, Op};
use crate::result::{self, guard, Failure, NcclResult};

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; UNIQUE_ID_BYTES],
}

type Comm = *mut NcclComm;
type Stream = *mut c_void;

/// `NCCL_SHRINK_ABORT`.
const SHRINK_ABORT: c_int = 0x01;
/// `NCCL_SUSPEND_MEM`.
const SUSPEND_MEM: c_int = 0x01;
/// `OXCCL_SHRINK_AGREE` (an oxccl extension): agree on the failed ranks and exclude them.
const SHRINK_AGREE: c_int = 0x100;

/// `NCCL_VERSION_CODE` of the header: 2.28.3.
pub const VERSION_CODE: c_int = 22803;

/// The environment's config, read at each creation call; logging set up once.
fn config() -> Result<Config, Failure> {
    let config = Config::from_env()?;
    ensure_logging();
    Ok(config)
}

/// Starts logging (NCCL_DEBUG, NCCL_DEBUG_SUBSYS) at the library's first call.
pub(crate) fn ensure_logging() {
    static LOG: Once = Once::new();
    LOG.call_once(|| {
        if let Ok(config) = Config::from_env() {
            oxccl_runtime::bootstrap::log::init(&config);
        }
    });
}

fn out<T>(ptr: *mut T, what: &str) -> Result<*mut T, Failure> {
    if ptr.is_null() {
        Err(Failure::argument(format!("{what} is NULL")))
    } else {
        Ok(ptr)
    }
}

/// Reads `blocking`, `minCTAs` and `maxCTAs` from a config of any header version (only
/// `size` bytes are read; a field the caller's struct lacks, or left at
/// NCCL_CONFIG_UNDEF_INT, keeps the environment's value). `maxCTAs` bounds the channels
/// (NCCL_MAX_NCHANNELS, where set, too: the fewer stands, as in NCCL; past 64 it is taken
/// up to the GPU's multiprocessors, as NCCL_MAX_NCHANNELS is), `minCTAs` raises the least;
/// a value under 1 is an error naming the field.
///
/// # Safety
/// `config` is NULL or points to at least `size` readable bytes, `size` being its first field.
unsafe fn read_config(config: *const c_void, base: Config) -> Result<Config, Failure> {
    let mut base = base;
    if config.is_null() {
        return Ok(base);
    }
    // SAFETY: every version of ncclConfig_t starts with size_t size, unsigned magic, unsigned version.
    let size = unsafe { (config as *const usize).read_unaligned() };
    // SAFETY: as above: `magic` is the u32 at offset 8 in every version.
    let magic = unsafe { (config as *const u8).add(8).cast::<u32>().read_unaligned() };
    if magic != 0xcafe_beef {
        return Err(Failure::argument(format!("config magic is {magic:#x}, not 0xcafebeef: initialise it with NCCL_CONFIG_INITIALIZER")));
    }
    if size >= 20 {
        // SAFETY: `blocking` is the int at offset 16, within `size` bytes.
        let blocking = unsafe { (config as *const u8).add(16).cast::<i32>().read_unaligned() };
        if blocking != i32::MIN {
            base.set("NCCL_COMM_BLOCKING", if blocking == 0 { "0" } else { "1" })?;
        }
    }
    if size >= 32 {
        // SAFETY: `minCTAs` and `maxCTAs` are the ints at offsets 24 and 28, within `size` bytes.
        let (min_ctas, max_ctas) = unsafe { ((config as *const u8).add(24).cast::<i32>().read_unaligned(), (config as *const u8).add(28).cast::<i32>().read_unaligned()) };
        let ctas = |name: &str, value: i32| match value {
            i32::MIN => Ok(None),
            v if v >= 1 => Ok(Some(v as usize)),
            v => Err(Failure::argument(format!("config {name} is {v}: a number of CTAs (channels) is at least 1, or NCCL_CONFIG_UNDEF_INT for the default"))),
        };
        if let Some(max) = ctas("maxCTAs", max_ctas)? {
            base.max_channels = Some(base.max_channels.map_or(max, |env| env.min(max)));
        }
        if let Some(min) = ctas("minCTAs", min_ctas)? {
            base.min_channels = base.min_channels.max(min);
        }
    }
    Ok(base)
}

macro_rules! exports {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $alias:ident ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module: C's pointer and handle contracts.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body

        /// The profiling alias of the function of the same name without the `p`.
        ///
        /// # Safety
        /// As that function.
        #[no_mangle]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> $ret {
            // SAFETY: the alias takes the same arguments under the same contract, which
            // its caller upholds.
            unsafe { $name($($arg),*) }
        }
    )*};
}

exports! {
    fn ncclGetVersion / pncclGetVersion(version: *mut c_int) -> NcclResult {
        guard("ncclGetVersion", || {
            // SAFETY: checked non-NULL; the caller passes an int.
            unsafe { *out(version, "version")? = VERSION_CODE };
            Ok(())
        })
    }

    fn ncclGetUniqueId / pncclGetUniqueId(unique_id: *mut NcclUniqueId) -> NcclResult {
        guard("ncclGetUniqueId", || {
            let out = out(unique_id, "uniqueId")?;
            let id = Bootstrap::create_id(&config()?)?;
            // SAFETY: checked non-NULL; an ncclUniqueId is 128 bytes.
            unsafe { (*out).internal = id.to_bytes() };
            Ok(())
        })
    }

    fn ncclGetErrorString / pncclGetErrorString(code: NcclResult) -> *const c_char {
        result::describe(code).as_ptr()
    }

    fn ncclGetLastError / pncclGetLastError(_comm: Comm) -> *const c_char {
        result::last()
    }

    fn ncclCommInitRank / pncclCommInitRank(comm: *mut Comm, nranks: c_int, id: NcclUniqueId, rank: c_int) -> NcclResult {
        guard("ncclCommInitRank", || init_rank(comm, nranks, &id, rank, config()?))
    }

    fn ncclCommInitRankConfig / pncclCommInitRankConfig(comm: *mut Comm, nranks: c_int, id: NcclUniqueId, rank: c_int, cfg: *mut c_void) -> NcclResult {
        // SAFETY: the caller's config, read by its own size.
        guard("ncclCommInitRankConfig", || init_rank(comm, nranks, &id, rank, unsafe { read_config(cfg, config()?)? }))
    }

    fn ncclCommInitRankScalable / pncclCommInitRankScalable(comm: *mut Comm, nranks: c_int, rank: c_int, n_ids: c_int, ids: *mut NcclUniqueId, cfg: *mut c_void) -> NcclResult {
        guard("ncclCommInitRankScalable", || {
            if n_ids < 1 || ids.is_null() {
                return Err(Failure::argument(format!("nId {n_ids} with commIds {ids:?}: at least one unique id is needed")));
            }
            // The first id's root serves the whole job (the others are spares here).
            // SAFETY: checked non-NULL; the caller passes nId ids.
            let id = unsafe { *ids };
            // SAFETY: as ncclCommInitRankConfig.
            init_rank(comm, nranks, &id, rank, unsafe { read_config(cfg, config()?)? })
        })
    }

    fn ncclCommInitAll / pncclCommInitAll(comms: *mut Comm, ndev: c_int, devlist: *const c_int) -> NcclResult {
        guard("ncclCommInitAll", || {
            let comms = out(comms, "comm")?;
            let n = u32::try_from(ndev).ok().filter(|&n| n > 0).ok_or_else(|| Failure::argument(format!("ndev {ndev} must be positive")))?;
            let config = config()?;
            if Memory::wants_gpu(&config)? {
                let gpus = oxccl_runtime::gpu::device_count();
                // devlist NULL: GPUs 0..ndev, as NCCL.
                let devices: Vec<usize> = if devlist.is_null() {
                    (0..n as usize).collect()
                } else {
                    // SAFETY: the caller passes ndev device numbers.
                    unsafe { std::slice::from_raw_parts(devlist, n as usize) }.iter().map(|&d| index(d, gpus, "devlist entry")).collect::<Result<_, _>>()?
                };
                for (i, d) in Communicator::init_all_gpus(&devices, &config)?.into_iter().enumerate() {
                    // SAFETY: the caller passes an array of ndev handles.
                    unsafe { *comms.add(i) = NcclComm::boxed_ready(d) };
                }
                return Ok(());
            }
            let all = Communicator::init_all(n, &config)?;
            for (i, c) in all.into_iter().enumerate() {
                // SAFETY: the caller passes an array of ndev handles.
                unsafe { *comms.add(i) = NcclComm::boxed_ready(c) };
            }
            Ok(())
        })
    }

    fn ncclCommSplit / pncclCommSplit(comm: Comm, color: c_int, key: c_int, newcomm: *mut Comm, cfg: *mut c_void) -> NcclResult {
        guard("ncclCommSplit", || {
            let newcomm = out(newcomm, "newcomm")?;
            // SAFETY: the caller's handle.
            let parent = unsafe { NcclComm::from_handle(comm)? }.comm()?;
            // SAFETY: the caller's config, read by its own size.
            if !unsafe { blocking(cfg, parent)? } {
                let pending = parent.split_nonblocking(color, key)?;
                // NOCOLOR: no handle; the parent reports ncclInProgress until the exchange
                // is done, as NCCL's does.
                return match pending {
                    Some(p) => hand_out_pending(newcomm, p),
                    None => {
                        // SAFETY: checked non-NULL.
                        unsafe { *newcomm = std::ptr::null_mut() };
                        Err(in_progress())
                    }
                };
            }
            let child = parent.split(color, key)?;
            // SAFETY: checked non-NULL.
            unsafe { *newcomm = child.map_or(Ok(std::ptr::null_mut()), NcclComm::boxed)? };
            Ok(())
        })
    }

    fn ncclCommShrink / pncclCommShrink(comm: Comm, exclude: *mut c_int, count: c_int, newcomm: *mut Comm, cfg: *mut c_void, flags: c_int) -> NcclResult {
        guard("ncclCommShrink", || {
            let newcomm = out(newcomm, "newcomm")?;
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? }.comm()?;
            let count = usize::try_from(count).map_err(|_| Failure::argument(format!("excludeRanksCount {count} is negative")))?;
            if count > 0 && exclude.is_null() {
                return Err(Failure::argument(format!("excludeRanksList is NULL with excludeRanksCount {count}")));
            }
            if flags & !(SHRINK_ABORT | SHRINK_AGREE) != 0 {
                return Err(Failure::argument(format!(
                    "shrinkFlags {flags:#x}: only NCCL_SHRINK_DEFAULT (0), NCCL_SHRINK_ABORT (1) and OXCCL_SHRINK_AGREE (0x100) exist"
                )));
            }
            let abort_first = flags & SHRINK_ABORT != 0;
            // SAFETY: the caller's config, read by its own size.
            let blocking = unsafe { blocking(cfg, c)? };
            if flags & SHRINK_AGREE != 0 {
                if count > 0 {
                    return Err(Failure::argument(format!("OXCCL_SHRINK_AGREE with excludeRanksCount {count}: the agreement finds the excluded ranks, pass none")));
                }
                if !blocking {
                    return hand_out_pending(newcomm, c.shrink_failed_nonblocking(abort_first));
                }
                let (child, _) = c.shrink_failed(abort_first)?;
                // SAFETY: checked non-NULL.
                unsafe { *newcomm = NcclComm::boxed(child)? };
                return Ok(());
            }
            // SAFETY: checked non-NULL; the caller passes count ranks.
            let list = if count == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(exclude, count) } };
            let list: Vec<usize> = list.iter().map(|&r| index(r, c.nranks(), "excludeRanksList entry")).collect::<Result<_, _>>()?;
            if !blocking && !list.contains(&c.rank()) {
                return hand_out_pending(newcomm, c.shrink_nonblocking(&list, abort_first)?);
            }
            let child = if list.contains(&c.rank()) { None } else { Some(c.shrink(&list, abort_first)?) };
            // SAFETY: checked non-NULL. An excluded rank gets NULL, as ncclCommSplit's NOCOLOR.
            unsafe { *newcomm = child.map_or(Ok(std::ptr::null_mut()), NcclComm::boxed)? };
            Ok(())
        })
    }

    fn ncclCommGrow / pncclCommGrow(comm: Comm, nranks: c_int, id: *const NcclUniqueId, rank: c_int, newcomm: *mut Comm, cfg: *mut c_void) -> NcclResult {
        guard("ncclCommGrow", || {
            let newcomm = out(newcomm, "newcomm")?;
            if id.is_null() {
                return Err(Failure::argument("uniqueId is NULL"));
            }
            let n = usize::try_from(nranks).ok().filter(|&n| n > 0).ok_or_else(|| Failure::argument(format!("nRanks {nranks} must be positive")))?;
            // SAFETY: checked non-NULL; an ncclUniqueId is 128 bytes.
            let unique = UniqueId::from_bytes(unsafe { &(*id).internal }).map_err(|e| Failure::argument(format!("uniqueId: {e}")))?;
            let child = if comm.is_null() {
                // A new rank: it joins at `rank`.
                let rank = index(rank, n, "rank")?;
                // SAFETY: the caller's config, read by its own size.
                let config = unsafe { read_config(cfg, config()?)? };
                if !config.blocking {
                    return hand_out_pending(newcomm, Communicator::init_nonblocking(&unique, rank as u32, n as u32, &config));
                }
                Communicator::init(&unique, rank as u32, n as u32, &config)?
            } else {
                // SAFETY: the caller's handle.
                let c = unsafe { NcclComm::from_handle(comm)? }.comm()?;
                if rank != -1 && usize::try_from(rank).ok() != Some(c.rank()) {
                    return Err(Failure::argument(format!("rank {rank} with an existing communicator: existing ranks keep their rank ({}); pass -1", c.rank())));
                }
                // SAFETY: the caller's config, read by its own size.
                if !unsafe { blocking(cfg, c)? } {
                    return hand_out_pending(newcomm, c.grow_nonblocking(n, &unique)?);
                }
                c.grow(n, &unique)?
            };
            // SAFETY: checked non-NULL.
            unsafe { *newcomm = NcclComm::boxed(child)? };
            Ok(())
        })
    }

    fn ncclCommGetUniqueId / pncclCommGetUniqueId(comm: Comm, unique_id: *mut NcclUniqueId) -> NcclResult {
        guard("ncclCommGetUniqueId", || {
            let out = out(unique_id, "uniqueId")?;
            // SAFETY: the caller's handle.
            let id = unsafe { NcclComm::from_handle(comm)? }.comm()?.grow_id()?;
            // SAFETY: checked non-NULL; an ncclUniqueId is 128 bytes.
            unsafe { (*out).internal = id.to_bytes() };
            Ok(())
        })
    }

    fn ncclCommFinalize / pncclCommFinalize(comm: Comm) -> NcclResult {
        // SAFETY: the caller's handle.
        guard("ncclCommFinalize", || Ok(unsafe { NcclComm::from_handle(comm)? }.comm()?.finalize()?))
    }

    fn ncclCommDestroy / pncclCommDestroy(comm: Comm) -> NcclResult {
        // SAFETY: the caller's handle, not used after this call.
        guard("ncclCommDestroy", || unsafe { NcclComm::destroy(comm) })
    }

    fn ncclCommAbort / pncclCommAbort(comm: Comm) -> NcclResult {
        guard("ncclCommAbort", || {
            // SAFETY: the caller's handle, not used after this call. A communicator still
            // being created has its creation given up first (NcclComm::abort); a GPU
            // connection already under way after it ends by the bootstrap timeouts.
            unsafe { NcclComm::from_handle(comm)? }.abort();
            // SAFETY: as above; after abort, dropping waits on no peer.
            unsafe { NcclComm::destroy(comm) }
        })
    }

    fn ncclCommRevoke / pncclCommRevoke(comm: Comm, flags: c_int) -> NcclResult {
        guard("ncclCommRevoke", || {
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? }.comm()?;
            if flags != 0 {
                return Err(Failure::argument(format!("revokeFlags {flags:#x}: only NCCL_REVOKE_DEFAULT (0) exists")));
            }
            Ok(c.revoke()?)
        })
    }

    fn ncclCommGetAsyncError / pncclCommGetAsyncError(comm: Comm, async_error: *mut NcclResult) -> NcclResult {
        guard("ncclCommGetAsyncError", || {
            let out = out(async_error, "asyncError")?;
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? };
            let code = c.async_error();
            // SAFETY: checked non-NULL.
            unsafe { *out = code };
            Ok(())
        })
    }

    fn ncclCommSuspend / pncclCommSuspend(comm: Comm, flags: c_int) -> NcclResult {
        guard("ncclCommSuspend", || {
            if flags & !SUSPEND_MEM != 0 {
                return Err(Failure::argument(format!("flags {flags:#x}: only NCCL_SUSPEND_MEM (0x1) is defined")));
            }
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? }.comm()?;
            Ok(c.suspend(flags & SUSPEND_MEM != 0)?)
        })
    }

    fn ncclCommResume / pncclCommResume(comm: Comm) -> NcclResult {
        // SAFETY: the caller's handle.
        guard("ncclCommResume", || Ok(unsafe { NcclComm::from_handle(comm)? }.comm()?.resume()?))
    }

    fn ncclCommMemStats / pncclCommMemStats(comm: Comm, stat: c_int, value: *mut u64) -> NcclResult {
        guard("ncclCommMemStats", || {
            let out = out(value, "value")?;
            // SAFETY: the caller's handle.
            let stats = unsafe { NcclComm::from_handle(comm)? }.comm()?.memory_stats();
            let v = match stat {
                0 => stats.releasable,
                1 => u64::from(stats.suspended),
                2 => stats.persistent,
                3 => stats.total(),
                other => return Err(Failure::argument(format!("stat {other}: ncclCommMemStat_t goes from ncclStatGpuMemSuspend (0) to ncclStatGpuMemTotal (3)"))),
            };
            // SAFETY: checked non-NULL.
            unsafe { *out = v };
            Ok(())
        })
    }

    fn ncclCommCount / pncclCommCount(comm: Comm, count: *mut c_int) -> NcclResult {
        guard("ncclCommCount", || {
            let out = out(count, "count")?;
            // SAFETY: the caller's handle; `out` checked non-NULL.
            unsafe { *out = NcclComm::from_handle(comm)?.comm()?.nranks() as c_int };
            Ok(())
        })
    }

    fn ncclCommCuDevice / pncclCommCuDevice(comm: Comm, device: *mut c_int) -> NcclResult {
        guard("ncclCommCuDevice", || {
            let out = out(device, "device")?;
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? };
            // The host backend has no CUDA device.
            let device = match c.comm()?.memory() {
                Memory::Gpu { device } => device as c_int,
                Memory::Host => -1,
            };
            // SAFETY: checked non-NULL.
            unsafe { *out = device };
            Ok(())
        })
    }

    fn ncclCommUserRank / pncclCommUserRank(comm: Comm, rank: *mut c_int) -> NcclResult {
        guard("ncclCommUserRank", || {
            let out = out(rank, "rank")?;
            // SAFETY: the caller's handle; `out` checked non-NULL.
            unsafe { *out = NcclComm::from_handle(comm)?.comm()?.rank() as c_int };
            Ok(())
        })
    }

    fn ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: Comm) -> NcclResult {
        guard("ncclRedOpCreatePreMulSum", || {
            let out = out(op, "op")?;
            let dtype = dtype(datatype)?;
            let host_immediate = match residence {
                0 => false,
                1 => true,
                r => return Err(Failure::argument(format!("residence {r} is neither ncclScalarDevice (0) nor ncclScalarHostImmediate (1)"))),
            };
            // SAFETY: the caller's handle.
            let c = unsafe { NcclComm::from_handle(comm)? };
            let value = c.create_op(dtype, scalar as *const u8, host_immediate)?;
            // SAFETY: checked non-NULL.
            unsafe { *out = value };
            Ok(())
        })
    }

    fn ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: Comm) -> NcclResult {
        // SAFETY: the caller's handle.
        guard("ncclRedOpDestroy", || unsafe { NcclComm::from_handle(comm)? }.destroy_op(op))
    }

    fn ncclAllReduce / pncclAllReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclAllReduce", || collective(Collective::AllReduce, send, recv, count, datatype, Some(op), 0, comm, stream))
    }

    fn ncclBroadcast / pncclBroadcast(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclBroadcast", || collective(Collective::Broadcast, send, recv, count, datatype, None, root, comm, stream))
    }

    fn ncclBcast / pncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclBcast", || collective(Collective::Broadcast, buff, buff, count, datatype, None, root, comm, stream))
    }

    fn ncclReduce / pncclReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclReduce", || collective(Collective::Reduce, send, recv, count, datatype, Some(op), root, comm, stream))
    }

    fn ncclAllGather / pncclAllGather(send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclAllGather", || collective(Collective::AllGather, send, recv, sendcount, datatype, None, 0, comm, stream))
    }

    fn ncclReduceScatter / pncclReduceScatter(send: *const c_void, recv: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclReduceScatter", || collective(Collective::ReduceScatter, send, recv, recvcount, datatype, Some(op), 0, comm, stream))
    }

    fn ncclAlltoAll / pncclAlltoAll(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclAlltoAll", || collective(Collective::AllToAll, send, recv, count, datatype, None, 0, comm, stream))
    }

    fn ncclGather / pncclGather(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclGather", || collective(Collective::Gather, send, recv, count, datatype, None, root, comm, stream))
    }

    fn ncclScatter / pncclScatter(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclScatter", || collective(Collective::Scatter, send, recv, count, datatype, None, root, comm, stream))
    }

    fn ncclSend / pncclSend(send: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclSend", || point_to_point(true, send as *mut c_void, count, datatype, peer, comm, stream))
    }

    fn ncclRecv / pncclRecv(recv: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream) -> NcclResult {
        guard("ncclRecv", || point_to_point(false, recv, count, datatype, peer, comm, stream))
    }

    fn ncclGroupStart / pncclGroupStart() -> NcclResult {
        guard("ncclGroupStart", || {
            group::start();
            Ok(())
        })
    }

    fn ncclGroupEnd / pncclGroupEnd() -> NcclResult {
        guard("ncclGroupEnd", group::end)
    }

    fn ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
        guard("ncclMemAlloc", || {
            let out = out(ptr, "ptr")?;
            if gpu_memory()? {
                // SAFETY: checked non-NULL.
                unsafe { *out = oxccl_runtime::gpu::mem_alloc(size)? as *mut c_void };
                return Ok(());
            }
            // Host memory on the host backend.
            // SAFETY: malloc has no preconditions; a NULL result is reported.
            let p = unsafe { libc::malloc(size.max(1)) };
            if p.is_null() {
                return Err(Failure { code: result::SYSTEM_ERROR, message: format!("cannot allocate {size} bytes") });
            }
            // SAFETY: checked non-NULL.
            unsafe { *out = p };
            Ok(())
        })
    }

    fn ncclMemFree / pncclMemFree(ptr: *mut c_void) -> NcclResult {
        guard("ncclMemFree", || {
            if oxccl_runtime::gpu::mem_free(ptr as u64)? {
                return Ok(());
            }
            // SAFETY: NULL or a pointer ncclMemAlloc returned from malloc.
            unsafe { libc::free(ptr) };
            Ok(())
        })
    }

    fn ncclCommRegister / pncclCommRegister(comm: Comm, buff: *mut c_void, _size: usize, handle: *mut *mut c_void) -> NcclResult {
        guard("ncclCommRegister", || {
            let out = out(handle, "handle")?;
            // SAFETY: the caller's handle.
            unsafe { NcclComm::from_handle(comm)? };
            // The host backend copies through its FIFOs: registration has nothing to do.
            // SAFETY: checked non-NULL.
            unsafe { *out = buff };
            Ok(())
        })
    }

    fn ncclCommDeregister / pncclCommDeregister(comm: Comm, _handle: *mut c_void) -> NcclResult {
        // SAFETY: the caller's handle.
        guard("ncclCommDeregister", || unsafe { NcclComm::from_handle(comm) }.map(|_| ()))
    }

    // Collectives with a per-call ncclCollConfig_t (NCCL 2.30+): the host backend has no
    // per-call tuning to apply, so the config is accepted and the call runs as without it.

    fn ncclAllReduceConfig / pncclAllReduceConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclAllReduceConfig", || collective(Collective::AllReduce, send, recv, count, datatype, Some(op), 0, comm, stream))
    }

    fn ncclBroadcastConfig / pncclBroadcastConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclBroadcastConfig", || collective(Collective::Broadcast, send, recv, count, datatype, None, root, comm, stream))
    }

    fn ncclReduceConfig / pncclReduceConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclReduceConfig", || collective(Collective::Reduce, send, recv, count, datatype, Some(op), root, comm, stream))
    }

    fn ncclAllGatherConfig / pncclAllGatherConfig(send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclAllGatherConfig", || collective(Collective::AllGather, send, recv, sendcount, datatype, None, 0, comm, stream))
    }

    fn ncclReduceScatterConfig / pncclReduceScatterConfig(send: *const c_void, recv: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclReduceScatterConfig", || collective(Collective::ReduceScatter, send, recv, recvcount, datatype, Some(op), 0, comm, stream))
    }

    fn ncclAlltoAllConfig / pncclAlltoAllConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclAlltoAllConfig", || collective(Collective::AllToAll, send, recv, count, datatype, None, 0, comm, stream))
    }

    fn ncclGatherConfig / pncclGatherConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclGatherConfig", || collective(Collective::Gather, send, recv, count, datatype, None, root, comm, stream))
    }

    fn ncclScatterConfig / pncclScatterConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, _config: *const c_void) -> NcclResult {
        guard("ncclScatterConfig", || collective(Collective::Scatter, send, recv, count, datatype, None, root, comm, stream))
    }

    // Newer NCCL calls that programs built against a newer header reference: exported so
    // that such programs load, and refused with a message until oxccl serves them.

    fn ncclCommWindowRegister / pncclCommWindowRegister(_comm: Comm, _buff: *mut c_void, _size: usize, _win: *mut *mut c_void, _flags: c_int) -> NcclResult {
        guard("ncclCommWindowRegister", || Err(Failure::unimplemented("ncclCommWindowRegister")))
    }

    fn ncclCommWindowDeregister / pncclCommWindowDeregister(_comm: Comm, _win: *mut c_void) -> NcclResult {
        guard("ncclCommWindowDeregister", || Err(Failure::unimplemented("ncclCommWindowDeregister")))
    }

    // NCCL 2.28's device API (nccl_device.h): its host calls are imported by programs
    // built against it (PyTorch 2.11's libtorch_cuda.so), which must load.
    fn ncclDevCommCreate / pncclDevCommCreate(_comm: Comm, _reqs: *const c_void, _dev_comm: *mut c_void) -> NcclResult {
        guard("ncclDevCommCreate", || Err(Failure::unimplemented("ncclDevCommCreate (NCCL's device API)")))
    }

    fn ncclDevCommDestroy / pncclDevCommDestroy(_comm: Comm, _dev_comm: *const c_void) -> NcclResult {
        guard("ncclDevCommDestroy", || Err(Failure::unimplemented("ncclDevCommDestroy (NCCL's device API)")))
    }

    fn ncclWinGetUserPtr / pncclWinGetUserPtr(_comm: Comm, _win: *mut c_void, _out: *mut *mut c_void) -> NcclResult {
        guard("ncclWinGetUserPtr", || Err(Failure::unimplemented("ncclWinGetUserPtr")))
    }

    fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(_sim_info: *mut c_void) -> NcclResult {
        guard("ncclGroupSimulateEnd", || Err(Failure::unimplemented("ncclGroupSimulateEnd")))
    }

    fn ncclPutSignal / pncclPutSignal(_local: *const c_void, _count: usize, _datatype: c_int, _peer: c_int, _peer_win: *mut c_void, _offset: usize, _sig: c_int, _ctx: c_int, _flags: u32, _comm: Comm, _stream: Stream) -> NcclResult {
        guard("ncclPutSignal", || Err(Failure::unimplemented("ncclPutSignal")))
    }

    fn ncclSignal / pncclSignal(_peer: c_int, _sig: c_int, _ctx: c_int, _flags: u32, _comm: Comm, _stream: Stream) -> NcclResult {
        guard("ncclSignal", || Err(Failure::unimplemented("ncclSignal")))
    }

    fn ncclWaitSignal / pncclWaitSignal(_n: c_int, _descs: *mut c_void, _comm: Comm, _stream: Stream) -> NcclResult {
        guard("ncclWaitSignal", || Err(Failure::unimplemented("ncclWaitSignal")))
    }

    fn ncclSetEncryption / pncclSetEncryption(_config: *const c_void) -> NcclResult {
        guard("ncclSetEncryption", || Err(Failure::unimplemented("ncclSetEncryption")))
    }

    fn ncclParamBind / pncclParamBind(_out: *mut *mut c_void, _key: *const c_char) -> NcclResult {
        guard("ncclParamBind", || Err(Failure::unimplemented("ncclParamBind (oxccl's settings are in docs/CONFIG.md)")))
    }

    fn ncclParamGet / pncclParamGet(_handle: *mut c_void, _out: *mut c_void, _max_len: c_int, _len: *mut c_int) -> NcclResult {
        guard("ncclParamGet", || Err(Failure::unimplemented("ncclParamGet")))
    }

    fn ncclParamGetStr / pncclParamGetStr(_handle: *mut c_void, _out: *mut *const c_char) -> NcclResult {
        guard("ncclParamGetStr", || Err(Failure::unimplemented("ncclParamGetStr")))
    }

    fn ncclParamGetParameter / pncclParamGetParameter(_key: *const c_char, _value: *mut *const c_char, _len: *mut c_int) -> NcclResult {
        guard("ncclParamGetParameter", || Err(Failure::unimplemented("ncclParamGetParameter")))
    }

    fn ncclParamGetAllParameterKeys / pncclParamGetAllParameterKeys(_table: *mut *mut *const c_char, _len: *mut c_int) -> NcclResult {
        guard("ncclParamGetAllParameterKeys", || Err(Failure::unimplemented("ncclParamGetAllParameterKeys")))
    }

    fn ncclParamGetI8 / pncclParamGetI8(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetI8", || Err(Failure::unimplemented("ncclParamGetI8")))
    }

    fn ncclParamGetI16 / pncclParamGetI16(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetI16", || Err(Failure::unimplemented("ncclParamGetI16")))
    }

    fn ncclParamGetI32 / pncclParamGetI32(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetI32", || Err(Failure::unimplemented("ncclParamGetI32")))
    }

    fn ncclParamGetI64 / pncclParamGetI64(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetI64", || Err(Failure::unimplemented("ncclParamGetI64")))
    }

    fn ncclParamGetU8 / pncclParamGetU8(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetU8", || Err(Failure::unimplemented("ncclParamGetU8")))
    }

    fn ncclParamGetU16 / pncclParamGetU16(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetU16", || Err(Failure::unimplemented("ncclParamGetU16")))
    }

    fn ncclParamGetU32 / pncclParamGetU32(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetU32", || Err(Failure::unimplemented("ncclParamGetU32")))
    }

    fn ncclParamGetU64 / pncclParamGetU64(_handle: *mut c_void, _out: *mut c_void) -> NcclResult {
        guard("ncclParamGetU64", || Err(Failure::unimplemented("ncclParamGetU64")))
    }

    /// Prints nothing: oxccl's settings are listed in docs/CONFIG.md.
    fn ncclParamDumpAll / pncclParamDumpAll() -> () {}

    /// Nothing to reset: oxccl reads NCCL_DEBUG once per process.
    fn ncclResetDebugInit / pncclResetDebugInit() -> () {}
}

/// Whether a split, shrink or grow of `parent` with config `cfg` blocks: the config's
/// `blocking` when it sets one, else the parent's (NCCL's inheritance).
///
/// # Safety
/// As [`read_config`].
unsafe fn blocking(cfg: *const c_void, parent: &Communicator) -> Result<bool, Failure> {
    // SAFETY: `cfg` is NULL or the caller's config of at least its `size` bytes (this
    // function's contract, which is read_config's).
    Ok(unsafe { read_config(cfg, parent.config().clone())? }.blocking)
}

fn in_progress() -> Failure {
    Failure { code: result::IN_PROGRESS, message: "communicator creation in progress (poll ncclCommGetAsyncError)".into() }
}

/// Hands out a communicator still being created (non-blocking split, shrink, grow) and
/// returns `ncclInProgress`. On the GPU backend a thread waits for it and connects the GPU
/// current here.
fn hand_out_pending(newcomm: *mut Comm, pending: oxccl_runtime::PendingCommunicator) -> Result<(), Failure> {
    let handle = if gpu_memory()? {
        NcclComm::boxed_connecting(pending, Some(oxccl_runtime::gpu::current_device()?))?
    } else {
        NcclComm::boxed_pending(pending)
    };
    // SAFETY: the caller checked `newcomm` non-NULL.
    unsafe { *newcomm = handle };
    Err(in_progress())
}

fn init_rank(comm: *mut Comm, nranks: c_int, id: &NcclUniqueId, rank: c_int, config: Config) -> Result<(), Failure> {
    let comm = out(comm, "comm")?;
    let n = u32::try_from(nranks).ok().filter(|&n| n > 0).ok_or_else(|| Failure::argument(format!("nranks {nranks} must be positive")))?;
    let rank = index(rank, n as usize, "rank")? as u32;
    let id = UniqueId::from_bytes(&id.internal).map_err(|e| Failure::argument(format!("commId: {e}")))?;
    let gpu = Memory::wants_gpu(&config)?;
    if group::active() || (!config.blocking && gpu) {
        // Inside a group (one thread may create every rank of a job), or non-blocking on
        // a GPU: create, and connect the GPU current here, on a thread of its own;
        // ncclGroupEnd waits for the blocking ones.
        let device = if gpu { Some(oxccl_runtime::gpu::current_device()?) } else { None };
        let blocking = config.blocking;
        let handle = NcclComm::boxed_connecting(Communicator::init_nonblocking(&id, rank, n, &config), device)?;
        // SAFETY: checked non-NULL.
        unsafe { *comm = handle };
        if group::active() {
            group::push_init(handle, blocking);
        }
        return if blocking { Ok(()) } else { Err(in_progress()) };
    }
    if !config.blocking {
        // Non-blocking: the handle exists at once; the caller polls ncclCommGetAsyncError.
        let pending = Communicator::init_nonblocking(&id, rank, n, &config);
        // SAFETY: checked non-NULL.
        unsafe { *comm = NcclComm::boxed_pending(pending) };
        return Err(in_progress());
    }
    let c = Communicator::init(&id, rank, n, &config)?;
    // SAFETY: checked non-NULL.
    unsafe { *comm = NcclComm::boxed(c)? };
    Ok(())
}

/// Whether ncclMemAlloc hands out GPU memory (the GPU backend) or host memory.
fn gpu_memory() -> Result<bool, Failure> {
    Ok(Memory::wants_gpu(&config()?)?)
}

#[allow(clippy::too_many_arguments)]
fn collective(collective: Collective, send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: Option<c_int>, root: c_int, comm: Comm, stream: Stream) -> Result<(), Failure> {
    // SAFETY: the caller's handle.
    let c = unsafe { NcclComm::from_handle(comm)? };
    let dtype = dtype(datatype)?;
    let op = match op {
        Some(op) => c.op(op, dtype)?,
        None => oxccl_kernels::ReduceOp::Sum,
    };
    let communicator = c.comm()?;
    let root = if collective.rooted() { index(root, communicator.nranks(), "root")? } else { 0 };
    if let Memory::Gpu { .. } = communicator.memory() {
        // GPU: the launch is asynchronous on the caller's stream, so inside a group it
        // runs at once too (nothing waits on the host).
        // SAFETY: the caller's device buffers and stream, valid until the stream passes
        // this call (NCCL's contract).
        return Ok(unsafe { communicator.launch_collective(collective, send as u64, recv as u64, count, dtype, op, root, stream as oxccl_runtime::gpu::CUstream) }?);
    }
    host_stream(stream)?;
    let (send, recv) = (send as *const u8, recv as *mut u8);
    if group::active() {
        group::push(Op::Collective { comm, collective, send, recv, count, dtype, op, root });
        return Ok(());
    }
    // SAFETY: the caller's buffers, valid for the collective's sizes and untouched until
    // this returns (NULL stream).
    Ok(unsafe { communicator.run_raw(collective, send, recv, count, dtype, op, root) }?)
}

fn point_to_point(is_send: bool, data: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream) -> Result<(), Failure> {
    // SAFETY: the caller's handle.
    let c = unsafe { NcclComm::from_handle(comm)? };
    let gpu = matches!(c.comm()?.memory(), Memory::Gpu { .. });
    if !gpu {
        host_stream(stream)?;
    }
    let dtype = dtype(datatype)?;
    let peer = index(peer, c.comm()?.nranks(), "peer")?;
    let bytes = count.checked_mul(dtype.size()).ok_or_else(|| Failure::argument(format!("count {count} overflows")))?;
    if bytes > 0 && data.is_null() {
        return Err(Failure::argument(format!("{} is NULL with count {count}", if is_send { "sendbuff" } else { "recvbuff" })));
    }
    let stream = stream as usize;
    let op = if is_send { Op::Send { comm, data: data as *const u8, bytes, peer, stream } } else { Op::Recv { comm, data: data as *mut u8, bytes, peer, stream } };
    if group::active() {
        group::push(op);
        return Ok(());
    }
    group::run(vec![op])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL 2.28's ncclConfig_t up to `maxCTAs` (offsets as nccl.h lays them out).
    #[repr(C)]
    struct ConfigHead {
        size: usize,
        magic: u32,
        version: u32,
        blocking: i32,
        cga_cluster_size: i32,
        min_ctas: i32,
        max_ctas: i32,
    }

    fn head(min_ctas: i32, max_ctas: i32) -> ConfigHead {
        ConfigHead { size: std::mem::size_of::<ConfigHead>(), magic: 0xcafe_beef, version: 22803, blocking: i32::MIN, cga_cluster_size: i32::MIN, min_ctas, max_ctas }
    }

    fn read(config: &ConfigHead, env: &[(&str, &str)]) -> Result<Config, Failure> {
        let mut base = Config::defaults();
        for (name, value) in env {
            base.set(name, value).unwrap();
        }
        // SAFETY: a whole ConfigHead, whose `size` says so.
        unsafe { read_config((config as *const ConfigHead).cast(), base) }
    }

    /// minCTAs and maxCTAs reach the channel bounds the GPU backend agrees on: unset they
    /// leave the environment's, set they bound it (the fewer of maxCTAs and
    /// NCCL_MAX_NCHANNELS, the more of minCTAs and NCCL_MIN_NCHANNELS); under 1 is an error
    /// naming the field; a struct too short to hold them is read as far as it goes.
    #[test]
    fn min_and_max_ctas_bound_the_channels() {
        let unset = read(&head(i32::MIN, i32::MIN), &[]).unwrap();
        assert_eq!((unset.min_channels, unset.max_channels), (1, None));
        let set = read(&head(4, 16), &[]).unwrap();
        assert_eq!((set.min_channels, set.max_channels), (4, Some(16)));
        let wide = read(&head(i32::MIN, 128), &[]).unwrap();
        assert_eq!(wide.max_channels, Some(128), "past NCCL's 64, as NCCL_MAX_NCHANNELS");
        let env = read(&head(2, 32), &[("NCCL_MAX_NCHANNELS", "8"), ("NCCL_MIN_NCHANNELS", "3")]).unwrap();
        assert_eq!((env.min_channels, env.max_channels), (3, Some(8)));
        for (min, max, name) in [(0, 16, "minCTAs is 0"), (1, -2, "maxCTAs is -2")] {
            let e = read(&head(min, max), &[]).unwrap_err();
            assert!(e.code == crate::result::INVALID_ARGUMENT && e.message.contains(name), "{}", e.message);
        }
        let mut short = head(4, 16);
        short.size = 24;
        let old = read(&short, &[]).unwrap();
        assert_eq!((old.min_channels, old.max_channels), (1, None), "a config of before NCCL 2.17 has no CTAs");
    }
}
