//! `ncclGroupStart` / `ncclGroupEnd`: operations called between them are collected per
//! thread and launched together at the outermost `ncclGroupEnd`, one runtime group per
//! communicator, all launched before any is waited for, so one thread can drive several
//! ranks (ncclCommInitAll) and matched sends and receives never deadlock.

use std::cell::{Cell, RefCell};

use oxccl_kernels::{DataType, ReduceOp};
use oxccl_runtime::Collective;

use crate::comm::NcclComm;
use crate::result::Failure;

/// One operation of a group, validated when it was called.
pub enum Op {
    Collective { comm: *mut NcclComm, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize },
    /// `stream`: the caller's CUDA stream (GPU communicators; NULL on the host).
    Send { comm: *mut NcclComm, data: *const u8, bytes: usize, peer: usize, stream: usize },
    Recv { comm: *mut NcclComm, data: *mut u8, bytes: usize, peer: usize, stream: usize },
}

impl Op {
    fn comm(&self) -> *mut NcclComm {
        match self {
            Op::Collective { comm, .. } | Op::Send { comm, .. } | Op::Recv { comm, .. } => *comm,
        }
    }
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static OPS: RefCell<Vec<Op>> = const { RefCell::new(Vec::new()) };
    /// Communicators created inside the group (each on a thread of its own), and whether
    /// ncclGroupEnd must wait for them (blocking communicators).
    static INITS: RefCell<Vec<(*mut NcclComm, bool)>> = const { RefCell::new(Vec::new()) };
}

/// Records a communicator whose creation started inside the group: one thread may create
/// several ranks of one job (ncclGroupStart, ncclCommInitRank per GPU, ncclGroupEnd), which
/// only complete together.
pub fn push_init(comm: *mut NcclComm, blocking: bool) {
    INITS.with(|i| i.borrow_mut().push((comm, blocking)));
}

/// Waits until every blocking communicator created in the group is ready (creation is
/// bounded by the bootstrap's timeouts); the first failure is returned.
fn finish_inits() -> Result<(), Failure> {
    let inits = INITS.with(|i| std::mem::take(&mut *i.borrow_mut()));
    let mut first = None;
    for (handle, blocking) in inits {
        if !blocking {
            continue;
        }
        // SAFETY: a handle this library made in this group; the caller cannot have
        // destroyed it before ncclGroupEnd returned it.
        let nccl = unsafe { NcclComm::from_handle(handle)? };
        loop {
            match nccl.comm() {
                Ok(_) => break,
                Err(f) if f.code == crate::result::IN_PROGRESS => std::thread::sleep(std::time::Duration::from_micros(200)),
                Err(f) => {
                    first.get_or_insert(f);
                    break;
                }
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Whether this thread is inside ncclGroupStart/End.
pub fn active() -> bool {
    DEPTH.with(Cell::get) > 0
}

pub fn start() {
    DEPTH.with(|d| d.set(d.get() + 1));
}

/// Queues an operation of the current group.
pub fn push(op: Op) {
    OPS.with(|ops| ops.borrow_mut().push(op));
}

/// Ends a group level; the outermost launches and completes every queued operation.
pub fn end() -> Result<(), Failure> {
    let depth = DEPTH.with(Cell::get);
    if depth == 0 {
        return Err(Failure::usage("ncclGroupEnd without a matching ncclGroupStart"));
    }
    DEPTH.with(|d| d.set(depth - 1));
    if depth > 1 {
        return Ok(());
    }
    let inits = finish_inits();
    let ops = OPS.with(|ops| std::mem::take(&mut *ops.borrow_mut()));
    let ran = run(ops);
    inits.and(ran)
}

/// Runs `ops`: per communicator, in call order, launched all before any is waited for.
/// A communicator whose share cannot be launched does not stop the others' from being
/// waited for: nothing launched is left running when this returns.
pub fn run(ops: Vec<Op>) -> Result<(), Failure> {
    let mut comms: Vec<*mut NcclComm> = Vec::new();
    for op in &ops {
        if !comms.contains(&op.comm()) {
            comms.push(op.comm());
        }
    }
    let mut works = Vec::new();
    let mut first: Option<Failure> = None;
    for &handle in &comms {
        // SAFETY: every op's comm was checked live when the op was queued.
        let comm = unsafe { NcclComm::from_handle(handle) }.and_then(|c| c.comm());
        match comm {
            Ok(dev) if matches!(dev.memory(), oxccl_runtime::Memory::Gpu { .. }) => {
                // GPU: the sends and receives of this communicator as one launch on the
                // stream of its first (NCCL wants one stream per communicator in a group).
                let mine: Vec<&Op> = ops.iter().filter(|op| op.comm() == handle).collect();
                let stream = mine.iter().find_map(|op| match op {
                    Op::Send { stream, .. } | Op::Recv { stream, .. } => Some(*stream),
                    Op::Collective { .. } => None,
                });
                let p2p: Vec<oxccl_runtime::gpu::P2p> = mine
                    .iter()
                    .filter_map(|op| match **op {
                        Op::Send { data, bytes, peer, .. } => Some(oxccl_runtime::gpu::P2p { send: true, peer, addr: data as u64, bytes }),
                        Op::Recv { data, bytes, peer, .. } => Some(oxccl_runtime::gpu::P2p { send: false, peer, addr: data as u64, bytes }),
                        Op::Collective { .. } => None,
                    })
                    .collect();
                if let Some(stream) = stream {
                    // SAFETY: the caller's device buffers and stream, valid until the
                    // stream passes this point (NCCL's contract).
                    if let Err(e) = unsafe { dev.launch_p2p(&p2p, stream as oxccl_runtime::gpu::CUstream) } {
                        first.get_or_insert(e.into());
                    }
                }
                continue;
            }
            Err(f) => {
                first.get_or_insert(f);
                continue;
            }
            Ok(_) => {}
        }
        match launch(handle, ops.iter().filter(|op| op.comm() == handle)) {
            Ok(work) => works.push(work),
            Err(f) => {
                first.get_or_insert(f);
            }
        }
    }
    for work in works {
        if let Err(e) = work.wait() {
            first.get_or_insert(e.into());
        }
    }
    first.map_or(Ok(()), Err)
}

/// Launches one communicator's share of a group.
fn launch<'a>(handle: *mut NcclComm, ops: impl Iterator<Item = &'a Op>) -> Result<oxccl_runtime::Work, Failure> {
    // SAFETY: every op's comm was checked live when the op was queued, and the caller may
    // not destroy a communicator with operations pending in its group.
    let nccl = unsafe { NcclComm::from_handle(handle)? };
    let mut group = nccl.comm()?.group();
    for op in ops {
        // SAFETY: the buffers were given by the caller for these operations and stay
        // untouched until ncclGroupEnd returns (NCCL's contract on a NULL stream).
        unsafe {
            match *op {
                Op::Collective { collective, send, recv, count, dtype, op, root, .. } => group.collective_raw(collective, send, recv, count, dtype, op, root).map(drop),
                Op::Send { data, bytes, peer, .. } => group.send_raw(data, bytes, peer).map(drop),
                Op::Recv { data, bytes, peer, .. } => group.recv_raw(data, bytes, peer).map(drop),
            }
        }?;
    }
    // SAFETY: as above; the caller waits for the work before returning to C.
    Ok(unsafe { group.launch_async() }?)
}
