//! What an `ncclComm_t` points to, and turning C arguments into runtime values.

use std::sync::{Arc, OnceLock};

use oxccl_kernels::{DataType, ReduceOp, Scalar};
use oxccl_runtime::{Communicator, Error, Memory, PendingCommunicator};
use parking_lot::Mutex;

use crate::result::Failure;

/// Tells a live communicator from garbage or a freed one.
const MAGIC: u64 = 0x6f78_6363_6c5f_636d; // "oxccl_cm"

/// `comm` on the memory OXCCL_BACKEND asks for ([`Memory::from_config`]), for GPU `device`
/// or this thread's current GPU. Moving onto a GPU connects the ranks: every rank does it
/// (as every rank calls the creating function).
pub fn on_configured_memory(comm: Communicator, device: Option<usize>) -> Result<Communicator, Failure> {
    let memory = Memory::from_config(comm.config(), device)?;
    Ok(comm.with_memory(memory)?)
}

/// The object behind `ncclComm_t`.
pub struct NcclComm {
    magic: u64,
    /// The communicator once created.
    ready: OnceLock<Communicator>,
    /// A non-blocking creation still running, or how it failed.
    pending: Mutex<Option<Pending>>,
    /// PreMulSum ops made on this communicator: op value `NUM_OPS + i` is entry `i`.
    ops: Mutex<Vec<Option<CustomOp>>>,
}

/// A PreMulSum op's scalar: read now (host immediate) or at each call (a pointer).
#[derive(Clone, Copy)]
enum ScalarSource {
    Immediate(Scalar),
    Pointer(usize),
}

#[derive(Clone, Copy)]
struct CustomOp {
    dtype: DataType,
    scalar: ScalarSource,
}

/// `ncclNumOps`: op values below are NCCL's built-ins.
pub const NUM_OPS: i32 = 5;

enum Pending {
    Running(PendingCommunicator),
    /// A creation whose result is then connected to a GPU (or made a host backend) on a
    /// thread of its own; `creation` is kept here so that an abort reaches its waits.
    Connecting { thread: std::thread::JoinHandle<Result<Communicator, Failure>>, creation: Arc<PendingCommunicator> },
    Failed(Error),
    FailedCall(Failure),
}

impl NcclComm {
    /// A handle for `comm` on the memory OXCCL_BACKEND chooses (see
    /// [`on_configured_memory`]).
    pub fn boxed(comm: Communicator) -> Result<*mut NcclComm, Failure> {
        Ok(NcclComm::boxed_ready(on_configured_memory(comm, None)?))
    }

    /// A handle for a communicator ready as it is.
    pub fn boxed_ready(comm: Communicator) -> *mut NcclComm {
        let ready = OnceLock::new();
        let _ = ready.set(comm);
        Box::into_raw(Box::new(NcclComm { magic: MAGIC, ready, pending: Mutex::new(None), ops: Mutex::new(Vec::new()) }))
    }

    /// A handle for a communicator being created (`creation`) and then moved onto the
    /// configured memory of `device` ([`on_configured_memory`]) on a thread of its own. Aborting the handle aborts
    /// the creation (its waits end within about 100 ms); the backend's connection that
    /// follows is bounded by the bootstrap timeouts.
    pub fn boxed_connecting(creation: PendingCommunicator, device: Option<usize>) -> Result<*mut NcclComm, Failure> {
        let creation = Arc::new(creation);
        let waited = creation.clone();
        // The creation is bounded by the bootstrap timeouts; this bound only backs them up.
        let bound = std::time::Duration::from_secs(24 * 3600);
        let thread = std::thread::Builder::new()
            .name("oxccl-connect".into())
            .spawn(move || on_configured_memory(waited.wait(bound)?, device))
            .map_err(|e| Failure { code: crate::result::SYSTEM_ERROR, message: format!("cannot start the thread creating the communicator: {e}") })?;
        let pending = Pending::Connecting { thread, creation };
        Ok(Box::into_raw(Box::new(NcclComm { magic: MAGIC, ready: OnceLock::new(), pending: Mutex::new(Some(pending)), ops: Mutex::new(Vec::new()) })))
    }

    /// A handle for a communicator still being created (non-blocking init).
    pub fn boxed_pending(pending: PendingCommunicator) -> *mut NcclComm {
        Box::into_raw(Box::new(NcclComm { magic: MAGIC, ready: OnceLock::new(), pending: Mutex::new(Some(Pending::Running(pending))), ops: Mutex::new(Vec::new()) }))
    }

    /// The communicator; `ncclInProgress` while a non-blocking creation runs, its error if
    /// it failed.
    pub fn comm(&self) -> Result<&Communicator, Failure> {
        if let Some(b) = self.ready.get() {
            return Ok(b);
        }
        let mut pending = self.pending.lock();
        let in_progress = || Failure { code: crate::result::IN_PROGRESS, message: "the communicator is still being created (poll ncclCommGetAsyncError)".into() };
        let outcome: Result<Communicator, Failure> = match pending.take() {
            Some(Pending::Running(p)) => match p.try_take() {
                None => {
                    *pending = Some(Pending::Running(p));
                    return Err(in_progress());
                }
                Some(Ok(c)) => Ok(c),
                Some(Err(e)) => {
                    *pending = Some(Pending::Failed(e.clone()));
                    return Err(e.into());
                }
            },
            Some(Pending::Connecting { thread, creation }) if !thread.is_finished() => {
                *pending = Some(Pending::Connecting { thread, creation });
                return Err(in_progress());
            }
            Some(Pending::Connecting { thread, .. }) => {
                thread.join().unwrap_or_else(|_| Err(Failure { code: crate::result::INTERNAL_ERROR, message: "the thread creating the communicator panicked".into() }))
            }
            Some(Pending::Failed(e)) => {
                *pending = Some(Pending::Failed(e.clone()));
                return Err(e.into());
            }
            Some(Pending::FailedCall(f)) => {
                *pending = Some(Pending::FailedCall(f.clone()));
                return Err(f);
            }
            None => return Err(Failure::usage("communicator has neither been created nor is being created")),
        };
        match outcome {
            Ok(b) => {
                let _ = self.ready.set(b);
                Ok(self.ready.get().expect("just set"))
            }
            Err(f) => {
                *pending = Some(Pending::FailedCall(f.clone()));
                Err(f)
            }
        }
    }

    /// ncclCommGetAsyncError's answer.
    pub fn async_error(&self) -> crate::result::NcclResult {
        match self.comm() {
            Ok(c) => c.error().map_or(crate::result::SUCCESS, |e| crate::result::code_of(&e)),
            Err(f) => f.code,
        }
    }

    /// Stops everything the communicator runs (abort), its creation included: a creation
    /// still running is given up (its waits end within about 100 ms; this waits for that,
    /// one second at most), so that its peers have been told when this returns. For
    /// ncclCommAbort, which then frees the handle.
    pub fn abort(&self) {
        match self.comm() {
            Ok(c) => c.abort(),
            Err(_) => {
                let pending = self.pending.lock();
                let creation = match &*pending {
                    Some(Pending::Running(p)) => p,
                    Some(Pending::Connecting { creation, .. }) => &**creation,
                    _ => return,
                };
                creation.abort();
                // Ends with the creation's Aborted (or takes out a communicator finished
                // meanwhile, aborted above, to be dropped).
                let _ = creation.wait(std::time::Duration::from_secs(1));
            }
        }
    }

    /// The communicator behind a C handle.
    ///
    /// # Safety
    /// `comm` is NULL or a handle this library returned and the caller has not destroyed
    /// (a destroyed one is caught by the magic check only while its memory is untouched).
    pub unsafe fn from_handle<'a>(comm: *mut NcclComm) -> Result<&'a NcclComm, Failure> {
        if comm.is_null() {
            return Err(Failure::argument("comm is NULL"));
        }
        // SAFETY: non-NULL (checked above) and, by this function's contract, a handle this
        // library made with Box::into_raw and the caller has not destroyed: a live NcclComm.
        let c = unsafe { &*comm };
        if c.magic != MAGIC {
            return Err(Failure::argument("comm is not a live communicator (destroyed, or not one of ours)"));
        }
        Ok(c)
    }

    /// Frees a handle.
    ///
    /// # Safety
    /// As [`NcclComm::from_handle`]; the handle is not used afterwards.
    pub unsafe fn destroy(comm: *mut NcclComm) -> Result<(), Failure> {
        // SAFETY: this function's contract is from_handle's; the call checks that the
        // handle is not NULL and carries our magic before it is freed below.
        unsafe { NcclComm::from_handle(comm)? };
        // SAFETY: every handle is made by Box::into_raw (the `boxed*` constructors), this
        // one is live (just checked), and the caller never uses it again (the contract), so
        // it is freed exactly once.
        let mut boxed = unsafe { Box::from_raw(comm) };
        boxed.magic = 0;
        // A creation still running is abandoned: nobody will take its result, so it stops
        // waiting for peers (a Running one does so when dropped; a Connecting one's
        // thread holds the creation too).
        if let Some(Pending::Connecting { creation, .. }) = &*boxed.pending.lock() {
            creation.abort();
        }
        drop(boxed);
        Ok(())
    }

    /// Records a PreMulSum op; returns its value.
    pub fn create_op(&self, dtype: DataType, scalar: *const u8, host_immediate: bool) -> Result<i32, Failure> {
        if scalar.is_null() {
            return Err(Failure::argument("scalar is NULL"));
        }
        let source = if host_immediate {
            // SAFETY: the caller passes a pointer to one element of `dtype` (checked non-NULL).
            let bytes = unsafe { std::slice::from_raw_parts(scalar, dtype.size()) };
            ScalarSource::Immediate(Scalar::from_bytes(dtype, bytes)?)
        } else {
            ScalarSource::Pointer(scalar as usize)
        };
        let mut ops = self.ops.lock();
        let index = match ops.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                ops.push(None);
                ops.len() - 1
            }
        };
        ops[index] = Some(CustomOp { dtype, scalar: source });
        Ok(NUM_OPS + index as i32)
    }

    pub fn destroy_op(&self, op: i32) -> Result<(), Failure> {
        let mut ops = self.ops.lock();
        let slot = usize::try_from(op - NUM_OPS).ok().and_then(|i| ops.get_mut(i)).filter(|s| s.is_some());
        match slot {
            Some(slot) => {
                *slot = None;
                Ok(())
            }
            None => Err(Failure::argument(format!("op {op} is not a PreMulSum op of this communicator"))),
        }
    }

    /// The reduction named by an `ncclRedOp_t` value for data of `dtype`.
    pub fn op(&self, op: i32, dtype: DataType) -> Result<ReduceOp, Failure> {
        if (0..NUM_OPS).contains(&op) {
            return Ok(ReduceOp::from_nccl(op)?);
        }
        let custom = usize::try_from(op - NUM_OPS).ok().and_then(|i| self.ops.lock().get(i).copied().flatten());
        let custom = custom.ok_or_else(|| Failure::argument(format!("op {op} is neither a built-in op (0..=4) nor a live PreMulSum op of this communicator")))?;
        if custom.dtype != dtype {
            return Err(Failure::argument(format!("PreMulSum op {op} was made for {} and cannot reduce {}", custom.dtype.name(), dtype.name())));
        }
        let scalar = match custom.scalar {
            ScalarSource::Immediate(s) => s,
            ScalarSource::Pointer(p) => {
                // SAFETY: ncclScalarDevice: the caller keeps the scalar valid for the op's
                // life (host memory on the host backend); read at each use, as NCCL does.
                let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, dtype.size()) };
                Scalar::from_bytes(dtype, bytes)?
            }
        };
        Ok(ReduceOp::PreMulSum(scalar))
    }
}

/// The datatype of an `ncclDataType_t` value.
pub fn dtype(value: i32) -> Result<DataType, Failure> {
    DataType::from_nccl(value).map_err(|_| Failure::argument(format!("datatype {value} is not an ncclDataType_t (0..=11)")))
}

/// Refuses a stream on the host backend.
pub fn host_stream(stream: *mut std::ffi::c_void) -> Result<(), Failure> {
    if stream.is_null() {
        Ok(())
    } else {
        Err(Failure::usage("a CUDA stream was given, but this communicator runs on the host backend (pass NULL: host buffers, the call completes before it returns)"))
    }
}

/// A rank, root or peer argument within `0..n`.
pub fn index(value: i32, n: usize, what: &str) -> Result<usize, Failure> {
    usize::try_from(value).ok().filter(|&v| v < n).ok_or_else(|| Failure::argument(format!("{what} {value} out of range for {n} ranks")))
}
