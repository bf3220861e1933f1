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

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::driver::{self, Event, PinnedHost};
use super::{CUstream, Inner, P2p, Pause};
use crate::error::{Error, Result};
use crate::{Collective, Communicator, DataType, ReduceOp};

/// The staging state of a communicator that spans hosts.
pub(super) struct Staged {
    rank: u32,
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

/// One operation for the worker: run `work` once the stream reached operation `seq`'s
/// kernel, then publish `seq` as done.
struct Job {
    seq: u64,
    work: Work,
}

enum Work {
    Collective { collective: Collective, input: *const u8, output: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize },
    /// Sends (`send`) and receives, each `bytes` at its address in the staging buffers.
    Group { ops: Vec<(bool, usize, *mut u8, usize)> },
}

// SAFETY: the pointers are into the staging buffers, which outlive every job (retired
// buffers are kept until the communicator goes); only the worker touches them while the
// job runs.
unsafe impl Send for Job {}

impl Staged {
    /// Starts the worker of `comm`, which publishes finished operations in `inner`'s
    /// done word.
    pub fn new(comm: Arc<Communicator>, inner: Arc<Inner>) -> Result<Staged> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        let rank = comm.rank();
        let worker = std::thread::Builder::new()
            .name(format!("oxccl-gpu-staged-{rank}"))
            .spawn(move || {
                for job in queue {
                    let result = run(&comm, &inner, &job);
                    if let Err(e) = result {
                        tracing::warn!(target: crate::log_target::COLL, "rank {rank}: staged operation {} failed: {e}", job.seq);
                        inner.fail(e);
                    }
                    inner.set_host_done(job.seq);
                }
            })
            .map_err(|e| Error::Internal(format!("starting the staging thread: {e}")))?;
        Ok(Staged { rank: rank as u32, jobs, worker, buffers: Mutex::new(Buffers { input: PinnedHost::new(0)?, output: PinnedHost::new(0)?, retired: Vec::new(), last: None, enqueued: 0 }) })
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
    /// As [`super::DeviceComm::enqueue`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective(&self, inner: &Inner, collective: Collective, send: u64, recv: u64, in_bytes: usize, out_bytes: usize, count: usize, dtype: DataType, op: ReduceOp, root: usize, stream: CUstream) -> Result<()> {
        let mut buffers = self.buffers.lock();
        buffers.fit(in_bytes, out_bytes)?;
        let (input, output) = (buffers.input.ptr, buffers.output.ptr);
        // SAFETY: the caller's stream; the staging buffers hold the bytes (just fitted).
        unsafe {
            buffers.after_last(stream)?;
            if in_bytes > 0 {
                driver::copy_to_host_async(input, send, in_bytes, stream)?;
            }
            let work = Work::Collective { collective, input, output, count, dtype, op, root };
            self.hand_over(inner, &mut buffers, work, stream)?;
            if out_bytes > 0 {
                driver::copy_to_device_async(recv, output, out_bytes, stream)?;
            }
            buffers.mark_last(stream)
        }
    }

    /// Enqueues a send/recv group on `stream`: the caller checked the operations.
    ///
    /// # Safety
    /// As [`super::DeviceComm::enqueue_p2p`].
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
        // SAFETY: the caller's stream and buffers; every offset is within the fitted spans.
        unsafe {
            buffers.after_last(stream)?;
            for (o, offset) in placed(true) {
                driver::copy_to_host_async(input.add(offset), o.addr, o.bytes, stream)?;
            }
            let sends = placed(true).map(|(o, offset)| (true, o.peer, input.add(offset), o.bytes));
            let recvs = placed(false).map(|(o, offset)| (false, o.peer, output.add(offset), o.bytes));
            self.hand_over(inner, &mut buffers, Work::Group { ops: sends.chain(recvs).collect() }, stream)?;
            for (o, offset) in placed(false) {
                driver::copy_to_device_async(o.addr, output.add(offset), o.bytes, stream)?;
            }
            buffers.mark_last(stream)
        }
    }

    /// Holds `stream` until the worker finished the operation, which it starts once the
    /// stream reached this point (the input copies enqueued before are done).
    ///
    /// # Safety
    /// `stream` is a stream of this GPU's context.
    unsafe fn hand_over(&self, inner: &Inner, buffers: &mut Buffers, work: Work, stream: CUstream) -> Result<()> {
        let seq = buffers.enqueued + 1;
        // SAFETY: the caller's stream; the kernel writes the reached word and reads the
        // done word and the watch words.
        unsafe { inner.launch_wait_host(seq, self.rank, stream)? };
        buffers.enqueued = seq;
        self.jobs.send(Job { seq, work }).map_err(|_| Error::Internal("the staging thread is gone".into()))
    }
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

/// Waits until the stream reached the job's kernel (its input is copied), then runs its
/// host operation.
fn run(comm: &Communicator, inner: &Inner, job: &Job) -> Result<()> {
    let deadline = Instant::now() + inner.timeout;
    let mut pause = Pause::default();
    loop {
        // A failed communicator runs nothing more (its streams are released unchanged).
        if let Some(e) = inner.failure.lock().clone() {
            return Err(e);
        }
        if inner.stream_reached() >= job.seq {
            break;
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout { phase: format!("waiting for the GPU to copy staged operation {}'s input", job.seq), waited: inner.timeout });
        }
        pause.pause();
    }
    match job.work {
        // SAFETY: the staging buffers hold the operation's input and output (fitted at
        // enqueue) and nothing else touches them until the job is published done.
        Work::Collective { collective, input, output, count, dtype, op, root } => unsafe { comm.run_raw(collective, input, output, count, dtype, op, root) },
        Work::Group { ref ops } => {
            let mut group = comm.group();
            for &(send, peer, at, bytes) in ops {
                // SAFETY: as above.
                unsafe {
                    if send {
                        group.send_raw(at, bytes, peer)?;
                    } else {
                        group.recv_raw(at, bytes, peer)?;
                    }
                }
            }
            group.end()
        }
    }
}
