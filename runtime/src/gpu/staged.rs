//! GPU communicators whose ranks span hosts. The GPU backend's connections (CUDA IPC,
//! NVLink) reach the ranks of one host only; across hosts every collective and send/recv
//! group is *staged*: its input is copied into pinned host memory on the caller's stream,
//! the host data path runs the operation there (shared memory within a host, the Net
//! between hosts: the same schedules, checked the same way), and the output is copied back
//! on the stream — which is held meanwhile by a one-thread kernel waiting for the host
//! (`ox_wait_host`). The call still only enqueues: a worker thread per communicator waits
//! until the stream reached the operation's kernel (which says so in mapped host memory:
//! the input copies before it are done), runs it, and releases the stream.
//!
//! Pieces: a large all_reduce or broadcast (element-wise: any range of elements is a
//! collective of its own) runs as host operations on consecutive 4 MiB ranges. Only the
//! first piece's input is copied on the caller's stream before the kernel, and only the
//! last piece's output after it; the worker copies each other piece's input on a stream of
//! its own while the host works on the piece before, and each finished piece's output on
//! another, so the PCIe copies overlap the host operations. The worker waits for its copies
//! before it releases the stream.
//!
//! Order: operations run on the worker in enqueue order, and each one's stream work waits
//! for the previous operation's (an event), whatever streams they were enqueued on, so one
//! pair of staging buffers serves them all. The buffers grow when an operation needs more
//! (pinned allocations do not wait for the GPU); outgrown ones are kept until the
//! communicator goes, since freeing pinned memory waits for the whole GPU.
//!
//! Failures: a host operation's error is the communicator's error (`async_error`,
//! `synchronize`, the next call); the stream is released all the same (its output is then
//! undefined, as after an abort). An abort or a dead peer stops the host operation through
//! the communicator, and the waiting kernel through the abort flag.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::driver::{self, Event, PinnedHost, Stream};
use super::{CUstream, Inner, P2p, Pause};
use crate::error::{Error, Result};
use crate::base::Core;
use crate::host::task::{CollectiveTask, PointToPoint, Task};
use crate::host::HostBackend;
use crate::{Collective, DataType, ReduceOp};

/// An all_reduce or broadcast of at least twice this many bytes is staged in pieces of
/// about this size, each its own host operation, so that the copies of one piece
/// overlap the host operation of another: only the first piece's input copy and the last
/// piece's output copy are not hidden. Every rank splits alike: the split depends on the
/// count and datatype only, which the collective's ranks share. Small pieces keep the host
/// operation's data in the caches (2×H200: 2, 4 and 8 MiB within noise of one another;
/// eight pieces of 32 MiB for 256 MiB measured 76 ms for broadcast, 4 MiB pieces 56).
const PIECE_BYTES: usize = 4 << 20;
/// Inputs are copied this many pieces ahead of the host operation: enough to hide each
/// copy behind the piece before, near enough that the host reads fresh data (copying every
/// input at once measured slower, as above).
const COPY_AHEAD: usize = 1;
/// Pieces start at multiples of this many bytes (every datatype's size divides it).
const PIECE_ALIGN: usize = 4096;

/// The staging state of a communicator that spans hosts.
pub(super) struct Staged {
    rank: u32,
    /// The host backend (over the communicator's core) that runs the host operations.
    host: Arc<Host>,
    jobs: crossbeam_channel::Sender<Job>,
    worker: std::thread::JoinHandle<()>,
    buffers: Mutex<Buffers>,
}

/// The staging buffers and the order of the operations using them.
pub(super) struct Buffers {
    input: PinnedHost,
    output: PinnedHost,
    /// Outgrown buffers: freed with the communicator (freeing waits for the GPU).
    retired: Vec<PinnedHost>,
    /// Recorded after the last operation's stream work: the next one waits for it.
    last: Option<Event>,
    /// Operations enqueued so far (the last one's number).
    enqueued: u64,
}

/// One operation for the worker: once the stream reached operation `seq`'s kernel, run
/// its pieces in order, then publish `seq` as done. The first piece's input copies and the
/// last piece's output copies are on the caller's stream (before and after the kernel);
/// the worker makes the rest on streams of its own.
struct Job {
    seq: u64,
    pieces: Vec<Piece>,
}

/// A part of an operation: the copies its host work needs, the work, the copies of what
/// it produced.
struct Piece {
    copy_in: Vec<Transfer>,
    work: Work,
    copy_out: Vec<Transfer>,
}

/// `bytes` between device address `device` and staging memory at `host`.
#[derive(Clone, Copy)]
struct Transfer {
    device: u64,
    host: *mut u8,
    bytes: usize,
}

enum Work {
    Collective { collective: Collective, input: *const u8, output: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize },
    /// Sends (`send`) and receives, each `bytes` at its address in the staging buffers.
    Group { ops: Vec<(bool, usize, *mut u8, usize)> },
}

// SAFETY: the pointers are into the staging buffers, which outlive every job (retired
// buffers are kept until the communicator goes), and into the caller's device buffers,
// which stay valid until the stream passes the operation; only the worker touches them
// while the job runs.
unsafe impl Send for Job {}

impl Staged {
    /// Starts the worker of `comm`, which publishes finished operations in `inner`'s
    /// done word. The GPU's context is current.
    pub fn new(core: Arc<Core>, inner: Arc<Inner>) -> Result<Staged> {
        let comm = Arc::new(Host { backend: HostBackend::new(core.clone())?, core });
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        let rank = comm.core.rank;
        let host = comm.clone();
        let mut worker = Worker::new(comm, inner)?;
        let worker = std::thread::Builder::new()
            .name(format!("oxccl-gpu-staged-{rank}"))
            .spawn(move || {
                if let Err(e) = worker.inner.device.bind() {
                    worker.inner.fail(e);
                }
                for job in queue {
                    let result = worker.run(&job);
                    if let Err(e) = result {
                        tracing::warn!(target: crate::log_target::COLL, "rank {rank}: staged operation {} failed: {e}", job.seq);
                        worker.inner.fail(e);
                    }
                    worker.inner.set_host_done(job.seq);
                }
            })
            .map_err(|e| Error::Internal(format!("starting the staging thread: {e}")))?;
        Ok(Staged { rank: rank as u32, host, jobs, worker, buffers: Mutex::new(Buffers { input: PinnedHost::new(0)?, output: PinnedHost::new(0)?, retired: Vec::new(), last: None, enqueued: 0 }) })
    }

    /// The host operations' error, if one failed.
    pub fn error(&self) -> Option<Error> {
        self.host.backend.error()
    }

    /// Ends the staging thread but leaks the buffers: a copy may still be pending on them.
    pub fn leak(self) {
        let Staged { jobs, buffers, .. } = self;
        drop(jobs);
        std::mem::forget(buffers);
    }

    /// After a failure: ends the staging thread without waiting for it (a host operation
    /// may still wait for a peer until its timeout) and frees the buffers only if it has
    /// already ended (else it may still write into them: they are leaked).
    pub fn abandon(self) {
        let Staged { jobs, worker, buffers, .. } = self;
        drop(jobs);
        if !worker.is_finished() {
            std::mem::forget(buffers);
        }
    }

    /// Waits for the staging thread to end (every operation is done: the streams were
    /// drained), so that it holds the communicator no more; the buffers, to be freed after
    /// the communicator (freeing pinned memory waits for the GPU, where a rank sharing it
    /// may wait in a kernel until this rank's communicator says goodbye).
    pub fn finish(self) -> Buffers {
        let Staged { jobs, worker, buffers, .. } = self;
        drop(jobs);
        let _ = worker.join();
        buffers.into_inner()
    }

    /// Enqueues a collective on `stream`: the caller checked the arguments.
    ///
    /// # Safety
    /// As [`super::GpuBackend::enqueue`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective(&self, inner: &Inner, collective: Collective, send: u64, recv: u64, in_bytes: usize, out_bytes: usize, count: usize, dtype: DataType, op: ReduceOp, root: usize, stream: CUstream) -> Result<()> {
        let mut buffers = self.buffers.lock();
        buffers.fit(in_bytes, out_bytes)?;
        let (input, output) = (buffers.input.ptr, buffers.output.ptr);
        let esize = dtype.size();
        // Element-wise collectives could all run in pieces; reduce measured no faster in
        // them (2×H200: 64 MiB 13–16 ms whole, 15–17 in pieces; 256 MiB even), so it stays
        // whole.
        let in_pieces = matches!(collective, Collective::AllReduce | Collective::Broadcast);
        let ranges = if in_pieces { piece_ranges(count, esize) } else { std::iter::once(0..count).collect() };
        let pieces = ranges.into_iter().map(|r| {
            // In pieces, a piece is the same elements of the input and the output (a side
            // without bytes, a broadcast's input off the root, stays empty); otherwise the
            // one piece is the whole of both.
            let at = r.start * esize;
            let side = |total: usize| if total == 0 || !in_pieces { total } else { r.len() * esize };
            // The staging buffers hold the piece's bytes where it has any (a side without
            // any is not read or written).
            let (input, output) = (input.wrapping_add(at), output.wrapping_add(at));
            let transfer = |device: u64, host: *mut u8, bytes: usize| (bytes > 0).then_some(Transfer { device: device + at as u64, host, bytes });
            Piece {
                copy_in: transfer(send, input, side(in_bytes)).into_iter().collect(),
                work: Work::Collective { collective, input, output, count: r.len(), dtype, op, root },
                copy_out: transfer(recv, output, side(out_bytes)).into_iter().collect(),
            }
        });
        // SAFETY: the caller's stream and buffers; the staging buffers hold the bytes.
        unsafe { self.enqueue(inner, &mut buffers, pieces.collect(), stream) }
    }

    /// Enqueues a send/recv group on `stream`: the caller checked the operations.
    ///
    /// # Safety
    /// As [`super::GpuBackend::enqueue_p2p`].
    pub unsafe fn group(&self, inner: &Inner, ops: &[P2p], stream: CUstream) -> Result<()> {
        // Sends packed into the input buffer, receives into the output buffer; transfers of
        // 0 bytes move nothing (on either side).
        let placed = |send: bool| ops.iter().filter(move |o| o.send == send && o.bytes > 0).scan(0usize, |at, o| {
            let offset = *at;
            *at += o.bytes.next_multiple_of(16);
            Some((o, offset))
        });
        let span = |send: bool| placed(send).last().map_or(0, |(o, offset)| offset + o.bytes);
        let mut buffers = self.buffers.lock();
        buffers.fit(span(true), span(false))?;
        let (input, output) = (buffers.input.ptr, buffers.output.ptr);
        // SAFETY: every offset is within the fitted spans.
        let transfers = |send: bool, base: *mut u8| placed(send).map(move |(o, offset)| Transfer { device: o.addr, host: unsafe { base.add(offset) }, bytes: o.bytes });
        let copy_in: Vec<Transfer> = transfers(true, input).collect();
        let copy_out: Vec<Transfer> = transfers(false, output).collect();
        let ops = copy_in.iter().zip(placed(true)).map(|(t, (o, _))| (true, o.peer, t.host, t.bytes)).chain(copy_out.iter().zip(placed(false)).map(|(t, (o, _))| (false, o.peer, t.host, t.bytes))).collect();
        // SAFETY: the caller's stream and buffers.
        unsafe { self.enqueue(inner, &mut buffers, vec![Piece { copy_in, work: Work::Group { ops }, copy_out }], stream) }
    }

    /// Enqueues `pieces` on `stream`: the first piece's input copies, the kernel that holds
    /// the stream until the worker finished them all, the last piece's output copies.
    ///
    /// # Safety
    /// `stream` is a stream of this GPU's context; the transfers are within the fitted
    /// staging buffers and the caller's buffers.
    unsafe fn enqueue(&self, inner: &Inner, buffers: &mut Buffers, mut pieces: Vec<Piece>, stream: CUstream) -> Result<()> {
        let first = std::mem::take(&mut pieces[0].copy_in);
        let last = std::mem::take(&mut pieces.last_mut().expect("at least one piece").copy_out);
        // SAFETY: per this function's contract.
        unsafe {
            buffers.after_last(stream)?;
            for t in &first {
                driver::copy_to_host_async(t.host, t.device, t.bytes, stream)?;
            }
            self.hand_over(inner, buffers, pieces, stream)?;
            for t in &last {
                driver::copy_to_device_async(t.device, t.host, t.bytes, stream)?;
            }
            buffers.mark_last(stream)
        }
    }

    /// Holds `stream` until the worker finished the operation, which it starts once the
    /// stream reached this point (the input copies enqueued before are done).
    ///
    /// # Safety
    /// `stream` is a stream of this GPU's context.
    unsafe fn hand_over(&self, inner: &Inner, buffers: &mut Buffers, pieces: Vec<Piece>, stream: CUstream) -> Result<()> {
        let seq = buffers.enqueued + 1;
        // SAFETY: the caller's stream; the kernel writes the reached word and reads the
        // done word and the watch words.
        unsafe { inner.launch_wait_host(seq, self.rank, stream)? };
        buffers.enqueued = seq;
        self.jobs.send(Job { seq, pieces }).map_err(|_| Error::Internal("the staging thread is gone".into()))
    }
}

/// The element ranges a staged element-wise collective of `count` elements of `esize`
/// bytes runs in: one piece per whole [`PIECE_BYTES`] (one below twice that), of equal
/// length rounded up to [`PIECE_ALIGN`] bytes (the last shorter).
fn piece_ranges(count: usize, esize: usize) -> Vec<Range<usize>> {
    let pieces = (count * esize / PIECE_BYTES).max(1);
    let per = count.div_ceil(pieces).next_multiple_of(PIECE_ALIGN / esize).max(1);
    (0..count).step_by(per).map(|start| start..(start + per).min(count)).collect()
}

impl Buffers {
    /// Grows the buffers to hold `input` and `output` bytes.
    fn fit(&mut self, input: usize, output: usize) -> Result<()> {
        for (buffer, bytes) in [(&mut self.input, input), (&mut self.output, output)] {
            if buffer.bytes < bytes {
                let grown = PinnedHost::new(bytes.next_power_of_two())?;
                self.retired.push(std::mem::replace(buffer, grown));
            }
        }
        Ok(())
    }

    /// Makes `stream` wait for the previous operation's stream work (it may be another
    /// stream): the staging buffers are free again after it.
    ///
    /// # Safety
    /// `stream` is a stream of this GPU's context.
    unsafe fn after_last(&self, stream: CUstream) -> Result<()> {
        match &self.last {
            // SAFETY: the caller's stream.
            Some(event) => unsafe { event.wait_on(stream) },
            None => Ok(()),
        }
    }

    /// Records the end of this operation's stream work.
    ///
    /// # Safety
    /// As [`Buffers::after_last`].
    unsafe fn mark_last(&mut self, stream: CUstream) -> Result<()> {
        match &self.last {
            // SAFETY: the caller's stream (a wait already made on the event keeps the
            // point it was made for).
            Some(event) => unsafe { event.rerecord(stream) },
            None => {
                // SAFETY: as above.
                self.last = Some(unsafe { Event::record(stream)? });
                Ok(())
            }
        }
    }
}

/// The host backend that runs the staged operations, and its communicator's core.
struct Host {
    backend: HostBackend,
    core: Arc<Core>,
}

impl Drop for Host {
    fn drop(&mut self) {
        // As a host communicator's drop: what this rank sent is taken by its peers first.
        if self.core.error().is_none() && self.backend.error().is_none() {
            if let Err(e) = self.backend.finalize() {
                tracing::warn!(target: crate::log_target::INIT, "rank {}: finalizing the staging host path: {e}", self.core.rank);
            }
        }
    }
}

/// The staging thread's state: the host backend that runs the host operations, and the
/// streams on which it copies the inner pieces' data.
struct Worker {
    comm: Arc<Host>,
    inner: Arc<Inner>,
    copy_in: Stream,
    copy_out: Stream,
    /// `marks[k % (COPY_AHEAD + 1)]`: recorded on `copy_in` after piece k's input copies.
    marks: Vec<Event>,
    /// Recorded on `copy_in` and `copy_out` after a job's copies: drained when done.
    ends: [Event; 2],
}

impl Worker {
    /// Makes the worker's streams: the GPU's context is current.
    fn new(comm: Arc<Host>, inner: Arc<Inner>) -> Result<Worker> {
        let (copy_in, copy_out) = (Stream::create()?, Stream::create()?);
        // SAFETY: streams of the current context, just made.
        let ends = unsafe { [Event::record(copy_in.raw())?, Event::record(copy_out.raw())?] };
        // SAFETY: as above.
        let marks = (0..=COPY_AHEAD).map(|_| unsafe { Event::record(copy_in.raw()) }).collect::<Result<_>>()?;
        Ok(Worker { comm, inner, copy_in, copy_out, marks, ends })
    }

    /// Waits until the stream reached the job's kernel (the first piece's input is
    /// copied), then runs the pieces; returns once none of the job's copies is pending.
    fn run(&mut self, job: &Job) -> Result<()> {
        let inner = self.inner.clone();
        wait(&inner, || Ok(inner.stream_reached() >= job.seq), || format!("waiting for the GPU to copy staged operation {}'s input", job.seq))?;
        let result = self.pieces(job);
        if job.pieces.len() == 1 {
            // The worker made no copies.
            return result;
        }
        // Whatever happened, the stream is released only once no copy of this job reads or
        // writes the caller's buffers or the staging buffers (the next job's).
        let drained = self.drain(job.seq);
        result.and(drained)
    }

    /// Each piece's host work once its input is in, then its output copies; the input
    /// copies go [`COPY_AHEAD`] pieces ahead (a mark after each piece's): the copies of one
    /// piece run while the host works on another.
    fn pieces(&mut self, job: &Job) -> Result<()> {
        if job.pieces.len() == 1 {
            // Nothing to overlap: both copies are on the caller's stream.
            // SAFETY: the staging buffers hold the operation's input and output.
            return unsafe { job.pieces[0].work.run(&self.comm) };
        }
        let mut issued = 0;
        for (k, piece) in job.pieces.iter().enumerate() {
            // Piece j's mark is reused for piece j + COPY_AHEAD + 1, issued only after the
            // wait for piece j below.
            for (j, ahead) in job.pieces.iter().enumerate().take(k + COPY_AHEAD + 1).skip(issued) {
                for t in &ahead.copy_in {
                    // SAFETY: the caller's input (the stream reached the kernel: the work
                    // before it is done) into the staging buffer; nobody else uses them
                    // meanwhile.
                    unsafe { driver::copy_to_host_async(t.host, t.device, t.bytes, self.copy_in.raw())? };
                }
                // SAFETY: a stream of this context.
                unsafe { self.marks[j % (COPY_AHEAD + 1)].rerecord(self.copy_in.raw())? };
                issued = j + 1;
            }
            let (inner, mark) = (&self.inner, &self.marks[k % (COPY_AHEAD + 1)]);
            wait(inner, || mark.done(), || format!("waiting for the GPU to copy piece {k} of staged operation {}'s input", job.seq))?;
            // SAFETY: the piece's input is in the staging buffer; its output goes to its
            // place there, which nothing else touches until the job is done.
            unsafe { piece.work.run(&self.comm)? };
            for t in &piece.copy_out {
                // SAFETY: the piece's output, finished, to the caller's output buffer.
                unsafe { driver::copy_to_device_async(t.device, t.host, t.bytes, self.copy_out.raw())? };
            }
        }
        Ok(())
    }

    /// Waits until the copies the worker made for the job are done, within the
    /// communicator's timeout (copies wait for nobody: only a broken GPU outlasts it).
    fn drain(&mut self, seq: u64) -> Result<()> {
        let deadline = Instant::now() + self.inner.timeout;
        for (end, stream) in self.ends.iter().zip([&self.copy_in, &self.copy_out]) {
            // SAFETY: a stream of this context.
            unsafe { end.rerecord(stream.raw())? };
            if !end.done_by(deadline)? {
                return Err(Error::Timeout { phase: format!("waiting for the copies of staged operation {seq}"), waited: self.inner.timeout });
            }
        }
        Ok(())
    }
}

/// Polls `ready` until it holds, the communicator failed (its error), or its timeout
/// passes (a timeout naming `phase`).
fn wait(inner: &Inner, mut ready: impl FnMut() -> Result<bool>, phase: impl FnOnce() -> String) -> Result<()> {
    let deadline = Instant::now() + inner.timeout;
    let mut pause = Pause::default();
    loop {
        // A failed communicator runs nothing more (its streams are released unchanged).
        if let Some(e) = inner.failure.lock().clone() {
            return Err(e);
        }
        if ready()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout { phase: phase(), waited: inner.timeout });
        }
        pause.pause();
    }
}

impl Work {
    /// Runs the host operation.
    ///
    /// # Safety
    /// The staging buffers hold its input and room for its output, and nothing else
    /// touches them until it returns.
    unsafe fn run(&self, host: &Host) -> Result<()> {
        let (n, rank) = (host.core.nranks, host.core.rank);
        let task = match *self {
            Work::Collective { collective, input, output, count, dtype, op, root } => Task::Collective(CollectiveTask::checked(collective, input, output, count, dtype, op, root, n, rank)?),
            Work::Group { ref ops } => {
                let p2p = ops.iter().map(|&(send, peer, at, bytes)| PointToPoint::checked(send, peer, at, bytes, n)).collect::<Result<_>>()?;
                Task::Group { p2p, collectives: Vec::new() }
            }
        };
        host.core.health()?;
        host.backend.run_now(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces cover every element once, in order, start on aligned bytes, and come in the
    /// number the rule gives: one up to twice the piece size, then one per whole piece size.
    #[test]
    fn pieces_cover_the_elements_once_in_aligned_parts() {
        for esize in [1, 2, 4, 8] {
            for bytes in [esize, 4096, PIECE_BYTES, 2 * PIECE_BYTES - esize, 2 * PIECE_BYTES, 2 * PIECE_BYTES + 3 * esize, 5 * PIECE_BYTES + 7 * esize, 64 << 20, (256 << 20) + esize] {
                let count = bytes / esize;
                let ranges = piece_ranges(count, esize);
                let expected = (bytes / PIECE_BYTES).max(1);
                assert_eq!(ranges.len(), expected, "{bytes} bytes of {esize}-byte elements: {ranges:?}");
                assert_eq!(ranges.first().map(|r| r.start), Some(0));
                assert_eq!(ranges.last().map(|r| r.end), Some(count));
                for pair in ranges.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start, "{ranges:?}");
                    assert_eq!(pair[1].start * esize % PIECE_ALIGN, 0, "{ranges:?}");
                }
                assert!(ranges.iter().all(|r| !r.is_empty()), "{ranges:?}");
            }
        }
    }
}
