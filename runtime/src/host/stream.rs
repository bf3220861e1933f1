//! A host stream: work runs in submission order on the stream's own thread, like a CUDA
//! stream; callers get a [`Work`] handle to wait on. An error is sticky: the failed job's
//! handle reports it, later jobs are skipped and report it too, as a CUDA stream's do.
//!
//! Latency matters for small collectives, and a thread handoff costs microseconds: a caller
//! that would only wait ([`HostStream::run_inline`]) runs its job on its own thread when the
//! stream is idle, the stream thread polls its queue briefly before sleeping, and a job's
//! completion wakes sleepers only when one waits for that job.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use oxccl_bootstrap::AbortFlag;
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// What runs a job of type `J`, on the stream thread or inline.
type Runner<J> = Arc<dyn Fn(J) -> Result<()> + Send + Sync>;

/// An ordered queue of jobs of type `J` with a thread that runs them through one runner
/// (jobs are plain values: nothing is boxed per job).
pub(crate) struct HostStream<J: Send + 'static> {
    jobs: Option<crossbeam_channel::Sender<(u64, J)>>,
    state: Arc<State>,
    run: Runner<J>,
    thread: Option<JoinHandle<()>>,
}

struct State {
    progress: Mutex<Progress>,
    changed: Condvar,
    abort: AbortFlag,
}

struct Progress {
    submitted: u64,
    completed: u64,
    /// The first failure: the job's sequence number and its error.
    failure: Option<(u64, Error)>,
    /// The smallest job number a sleeping waiter waits for (`u64::MAX`: none).
    wake_at: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress { submitted: 0, completed: 0, failure: None, wake_at: u64::MAX }
    }
}

impl State {
    /// Records job `seq`'s result and wakes the waiters it concerns.
    fn complete(&self, seq: u64, result: Result<()>) {
        let mut p = self.progress.lock();
        if let Err(e) = result {
            p.failure.get_or_insert((seq, e));
        }
        p.completed = seq;
        if seq >= p.wake_at || p.failure.is_some() {
            p.wake_at = u64::MAX;
            self.changed.notify_all();
        }
    }
}

/// Queue polls before the stream thread sleeps: back-to-back submissions then cost no wakeup.
const IDLE_POLLS: u32 = 200;

/// A handle on one submitted job.
#[derive(Clone)]
pub struct Work {
    seq: u64,
    state: Arc<State>,
}

impl<J: Send + 'static> HostStream<J> {
    /// Starts the stream's thread, which hands each job to `run`. `abort` ends waits on the
    /// stream early.
    pub fn new(name: &str, abort: AbortFlag, run: impl Fn(J) -> Result<()> + Send + Sync + 'static) -> Result<HostStream<J>> {
        let (tx, rx) = crossbeam_channel::unbounded::<(u64, J)>();
        let state = Arc::new(State { progress: Mutex::new(Progress::default()), changed: Condvar::new(), abort });
        let worker = state.clone();
        let run: Runner<J> = Arc::new(run);
        let runner = run.clone();
        let thread = std::thread::Builder::new()
            .name(format!("oxccl-stream-{name}"))
            .spawn(move || loop {
                let mut next = rx.try_recv().ok();
                let mut polls = 0;
                while next.is_none() && polls < IDLE_POLLS {
                    std::thread::yield_now();
                    next = rx.try_recv().ok();
                    polls += 1;
                }
                let Some((seq, job)) = next.or_else(|| rx.recv().ok()) else { return };
                let skip = {
                    let mut p = worker.progress.lock();
                    // A job the caller ran inline may still be running: keep the order.
                    while p.completed + 1 < seq && p.failure.is_none() {
                        worker.changed.wait_for(&mut p, Duration::from_millis(10));
                    }
                    p.failure.clone()
                };
                let result = match skip {
                    Some((_, e)) => Err(e),
                    None => runner(job),
                };
                worker.complete(seq, result);
            })
            .map_err(|e| Error::Internal(format!("cannot start a stream thread: {e}")))?;
        Ok(HostStream { jobs: Some(tx), state, run, thread: Some(thread) })
    }

    /// Queues a job; it runs after every job queued before it.
    pub fn submit(&self, job: J) -> Result<Work> {
        let mut p = self.state.progress.lock();
        if let Some((_, e)) = &p.failure {
            return Err(e.clone());
        }
        p.submitted += 1;
        let seq = p.submitted;
        self.jobs
            .as_ref()
            .expect("the sender lives until drop")
            .send((seq, job))
            .map_err(|_| Error::Internal("stream thread is gone".into()))?;
        Ok(Work { seq, state: self.state.clone() })
    }

    /// Runs `job` in order with the stream's work and returns its result: on the calling
    /// thread when the stream is idle (no thread handoff), else queued and waited for.
    pub fn run_inline(&self, job: J) -> Result<()> {
        let seq = {
            let mut p = self.state.progress.lock();
            if let Some((_, e)) = &p.failure {
                return Err(e.clone());
            }
            if p.completed != p.submitted {
                drop(p);
                return self.submit(job)?.wait();
            }
            p.submitted += 1;
            p.submitted
        };
        // Jobs submitted from here on wait in the stream thread for this one to complete.
        let result = (self.run)(job);
        self.state.complete(seq, result.clone());
        result
    }

    /// Waits for every job submitted so far.
    pub fn synchronize(&self) -> Result<()> {
        let seq = self.state.progress.lock().submitted;
        Work { seq, state: self.state.clone() }.wait()
    }

    /// [`HostStream::synchronize`], failing with a timeout once no job has completed for
    /// `stall` (a teardown is then not held for ever by a job counted and never finished).
    pub fn synchronize_within(&self, stall: Duration) -> Result<()> {
        let seq = self.state.progress.lock().submitted;
        Work { seq, state: self.state.clone() }.wait_within(stall)
    }

    /// The sticky error, if a job failed.
    pub fn error(&self) -> Option<Error> {
        self.state.progress.lock().failure.as_ref().map(|(_, e)| e.clone())
    }

    /// Wakes waiters so that they see the abort flag.
    pub fn wake(&self) {
        let _p = self.state.progress.lock();
        self.state.changed.notify_all();
    }
}

impl<J: Send + 'static> Drop for HostStream<J> {
    fn drop(&mut self) {
        // Closing the queue ends the thread once the queued jobs have run (each job has its
        // own deadlines and abort checks, so this join is bounded).
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Work {
    /// Waits until the job has run; its error, or an earlier job's, is returned. Returns
    /// `Aborted` at once when the stream's abort flag is set.
    pub fn wait(&self) -> Result<()> {
        self.wait_within(Duration::MAX)
    }

    /// [`Work::wait`], with a `Timeout` once no job of the stream has completed for `stall`.
    fn wait_within(&self, stall: Duration) -> Result<()> {
        let mut p = self.state.progress.lock();
        let (mut seen, mut since) = (p.completed, std::time::Instant::now());
        loop {
            if p.completed >= self.seq {
                return match &p.failure {
                    Some((seq, e)) if *seq <= self.seq => Err(e.clone()),
                    _ => Ok(()),
                };
            }
            if self.state.abort.is_raised() {
                return Err(Error::Aborted { reason: String::new() });
            }
            if p.completed != seen {
                (seen, since) = (p.completed, std::time::Instant::now());
            } else if since.elapsed() >= stall {
                let phase = format!("waiting for the host stream's queued work (job {}; {} of {} submitted completed, none for the last {stall:?})", self.seq, p.completed, p.submitted);
                return Err(Error::Timeout { phase, waited: stall });
            }
            p.wake_at = p.wake_at.min(self.seq);
            // Wake periodically to see an abort flag set without a notification.
            self.state.changed.wait_for(&mut p, Duration::from_millis(50));
        }
    }

    /// Whether the job has run.
    pub fn is_done(&self) -> bool {
        self.state.progress.lock().completed >= self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Closure = Box<dyn FnOnce() -> Result<()> + Send>;

    /// A stream of closures, for these tests.
    fn closures(abort: AbortFlag) -> HostStream<Closure> {
        HostStream::new("t", abort, |job: Closure| job()).unwrap()
    }

    /// A teardown's wait gives up, naming the jobs, once none has completed for its
    /// limit (here a job that takes far longer); a wait that sees jobs complete goes on.
    #[test]
    fn a_bounded_synchronize_times_out_when_no_job_completes() {
        let stream = closures(AbortFlag::new());
        let (release, held) = std::sync::mpsc::channel::<()>();
        stream
            .submit(Box::new(move || {
                let _ = held.recv();
                Ok(())
            }))
            .unwrap();
        let start = std::time::Instant::now();
        let e = stream.synchronize_within(Duration::from_millis(300)).unwrap_err().to_string();
        assert!(start.elapsed() >= Duration::from_millis(300) && start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        assert!(e.contains("0 of 1 submitted completed"), "{e}");
        release.send(()).unwrap();
        // Jobs completing one after another, each quicker than the limit: no timeout.
        for _ in 0..5 {
            stream.submit(Box::new(|| { std::thread::sleep(Duration::from_millis(100)); Ok(()) })).unwrap();
        }
        stream.synchronize_within(Duration::from_millis(300)).unwrap();
    }

    #[test]
    fn runs_in_order_and_reports_each_job() {
        let stream = closures(AbortFlag::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let works: Vec<Work> = (0..50)
            .map(|i| {
                let order = order.clone();
                stream.submit(Box::new(move || {
                    order.lock().push(i);
                    Ok(())
                }))
                .unwrap()
            })
            .collect();
        works.last().unwrap().wait().unwrap();
        assert!(works.iter().all(Work::is_done));
        assert_eq!(*order.lock(), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn errors_are_sticky() {
        let stream = closures(AbortFlag::new());
        let ran = Arc::new(AtomicUsize::new(0));
        let ok = stream.submit(Box::new(|| Ok(()))).unwrap();
        let bad = stream.submit(Box::new(|| Err(Error::invalid("boom")))).unwrap();
        let r = ran.clone();
        let after = stream
            .submit(Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }))
            .unwrap();
        ok.wait().unwrap();
        assert!(bad.wait().unwrap_err().to_string().contains("boom"));
        assert!(after.wait().is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert!(stream.submit(Box::new(|| Ok(()))).is_err());
        assert!(stream.synchronize().is_err());
    }

    #[test]
    fn abort_ends_a_wait_on_a_stuck_job() {
        let abort = AbortFlag::new();
        let stream = closures(abort.clone());
        let flag = abort.clone();
        let stuck = stream
            .submit(Box::new(move || {
                while !flag.is_raised() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(Error::Aborted { reason: String::new() })
            }))
            .unwrap();
        let waiter = std::thread::spawn(move || stuck.wait());
        std::thread::sleep(Duration::from_millis(30));
        let start = std::time::Instant::now();
        abort.raise();
        stream.wake();
        assert!(waiter.join().unwrap().is_err());
        assert!(start.elapsed() < Duration::from_millis(500));
    }
}
