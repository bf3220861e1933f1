//! The proxy's timeline, for finding where a message's time went (`OXCCL_PROXY_TRACE`, as
//! NCCL's proxy profiler traces its proxy): for each message of each network link of a
//! communicator, how long its link waited for the message's slot to be filled (by a GPU
//! kernel, the host executor or a PXN relay's origin), how long the Net took to send it, and
//! how long each receive took from posted to complete, and when each operation was
//! announced to the link (the rank issued it) until its proxy thread took it in; for each
//! proxy thread of the process, when it slept. Written when the communicator goes (`NetLinks`' drop, once its
//! links closed or 2 s passed), as one Chrome trace (JSON, for Perfetto or
//! chrome://tracing) per communicator and rank: `<path>.pid<pid>.comm<n>.rank<r>.json`,
//! the rank as the trace's process and each link
//! (and each proxy thread) a track of it. Times are microseconds since the Unix epoch, so
//! that the files of ranks on one machine line up when opened together (a double holds
//! them to about 0.25 µs: each span's `args` also carry its begin and end as integer ns,
//! `begin_ns` and `end_ns`). A communicator
//! keeps at most [`MAX_EVENTS`] events and says how many it dropped past that.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// The most events one communicator keeps (about 64 MiB of JSON).
pub(crate) const MAX_EVENTS: usize = 1_000_000;

/// One communicator's timeline on one rank.
pub(crate) struct Recorder {
    file: PathBuf,
    rank: usize,
    since: Instant,
    /// Track names, by track number (a link each; proxy threads come after).
    tracks: Mutex<Vec<String>>,
    events: Mutex<Vec<Span>>,
    dropped: AtomicU64,
    written: AtomicBool,
}

/// One interval of a track.
struct Span {
    track: u32,
    name: &'static str,
    begin: Instant,
    end: Instant,
    /// The link's message number (send) or receive number (receive).
    number: u64,
    /// Messages and bytes it carried (0 where the Net has not said yet).
    messages: usize,
    bytes: usize,
}

/// A link's place in its communicator's timeline: its track, made at its first event, and
/// the number of the next operation announced to it.
#[derive(Default)]
pub(crate) struct LinkTimeline {
    track: Option<u32>,
    announced: u64,
}

impl LinkTimeline {
    /// Whether the link has no track yet: its next event names one.
    pub fn unnamed(&self) -> bool {
        self.track.is_none()
    }

    /// Records that the link spent `begin..end` on `name`, for its message or receive
    /// `number` of `messages` messages and `bytes` bytes; `named` is the link's description
    /// when it is [`unnamed`](LinkTimeline::unnamed).
    #[allow(clippy::too_many_arguments)]
    pub fn span(&mut self, recorder: &Recorder, named: Option<String>, name: &'static str, begin: Instant, end: Instant, number: u64, messages: usize, bytes: usize) {
        let track = match self.track {
            Some(track) => track,
            None => *self.track.insert(recorder.track(named.unwrap_or_default())),
        };
        recorder.span(track, name, begin, end, number, messages, bytes);
    }

    /// Records that an operation announced `messages` for the link at `at`, taken in by its
    /// proxy thread now: when the rank issued it, and how long the proxy took to see it.
    pub fn announced(&mut self, recorder: &Recorder, named: Option<String>, at: Instant, messages: u64) {
        let number = self.announced;
        self.announced += 1;
        self.span(recorder, named, "announced", at, Instant::now(), number, messages as usize, 0);
    }
}

/// Whether any communicator of the process traces: proxy threads then record their sleeps.
static TRACING: AtomicBool = AtomicBool::new(false);
/// The proxy threads' sleeps (thread, begin, end), for every tracing communicator.
static SLEEPS: Mutex<Vec<(usize, Instant, Instant)>> = Mutex::new(Vec::new());

impl Recorder {
    /// The timeline of communicator number `comm` of this process on `rank`, to go to a file
    /// named after `path`; an error naming the file if it cannot be written (tried now, so
    /// that a wrong path fails the communicator's creation rather than its end).
    pub fn new(path: &str, comm: u64, rank: usize) -> std::io::Result<Recorder> {
        let file = PathBuf::from(format!("{path}.pid{}.comm{comm}.rank{rank}.json", std::process::id()));
        std::fs::File::create(&file).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
        TRACING.store(true, Ordering::Relaxed);
        Ok(Recorder { file, rank, since: Instant::now(), tracks: Mutex::default(), events: Mutex::default(), dropped: AtomicU64::new(0), written: AtomicBool::new(false) })
    }

    /// A new track named `name` (a link): its number.
    pub fn track(&self, name: String) -> u32 {
        let mut tracks = self.tracks.lock();
        tracks.push(name);
        (tracks.len() - 1) as u32
    }

    /// Records that `track` spent `begin..end` on `name`, for its message or receive
    /// `number` of `messages` messages and `bytes` bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn span(&self, track: u32, name: &'static str, begin: Instant, end: Instant, number: u64, messages: usize, bytes: usize) {
        let mut events = self.events.lock();
        if events.len() >= MAX_EVENTS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        events.push(Span { track, name, begin, end, number, messages, bytes });
    }

    /// Writes the file, once (later calls do nothing); an error names the file.
    pub fn write(&self) -> std::io::Result<()> {
        if self.written.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let text = self.json();
        std::fs::write(&self.file, text).map_err(|e| std::io::Error::new(e.kind(), format!("writing the proxy trace {}: {e}", self.file.display())))?;
        tracing::info!(target: crate::log_target::PROXY, "rank {}: proxy trace written to {}", self.rank, self.file.display());
        Ok(())
    }

    /// The timeline as a Chrome trace.
    fn json(&self) -> String {
        let tracks = self.tracks.lock().clone();
        let events = std::mem::take(&mut *self.events.lock());
        let now = Instant::now();
        let sleeps: Vec<(usize, Instant, Instant)> = SLEEPS.lock().iter().filter(|(_, begin, end)| *end >= self.since && *begin <= now).copied().collect();
        let pid = self.rank;
        let mut out = String::with_capacity(128 * (events.len() + sleeps.len() + tracks.len()) + 256);
        out.push_str("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        let _ = write!(out, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":\"rank {pid}\"}}}}");
        for (track, name) in tracks.iter().enumerate() {
            let _ = write!(out, ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{track},\"args\":{{\"name\":{}}}}}", quoted(name));
        }
        let threads: std::collections::BTreeSet<usize> = sleeps.iter().map(|(thread, ..)| *thread).collect();
        let thread_track = |thread: usize| tracks.len() + thread;
        for thread in threads {
            let _ = write!(out, ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":\"oxccl-proxy-{thread}\"}}}}", thread_track(thread));
        }
        for e in &events {
            let _ = write!(
                out,
                ",\n{{\"ph\":\"X\",\"name\":\"{}\",\"pid\":{pid},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"number\":{},\"begin_ns\":{},\"end_ns\":{},\"messages\":{},\"bytes\":{}}}}}",
                e.name,
                e.track,
                micros(e.begin),
                e.end.saturating_duration_since(e.begin).as_secs_f64() * 1e6,
                e.number,
                epoch_nanos(e.begin),
                epoch_nanos(e.end),
                e.messages,
                e.bytes
            );
        }
        for (thread, begin, end) in &sleeps {
            let _ = write!(out, ",\n{{\"ph\":\"X\",\"name\":\"sleep\",\"pid\":{pid},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}", thread_track(*thread), micros(*begin), end.saturating_duration_since(*begin).as_secs_f64() * 1e6);
        }
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            let _ = write!(out, ",\n{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{pid},\"args\":{{\"labels\":\"{dropped} events dropped past {MAX_EVENTS}\"}}}}");
        }
        out.push_str("\n]}\n");
        out
    }
}

/// Records that proxy thread `thread` slept `begin..end`, if any communicator traces.
pub(crate) fn sleep(thread: usize, begin: Instant, end: Instant) {
    if TRACING.load(Ordering::Relaxed) {
        let mut sleeps = SLEEPS.lock();
        if sleeps.len() < MAX_EVENTS {
            sleeps.push((thread, begin, end));
        }
    }
}

/// Whether proxy threads should time their sleeps.
pub(crate) fn tracing() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// `at` in microseconds since the Unix epoch.
fn micros(at: Instant) -> f64 {
    epoch_nanos(at) as f64 / 1e3
}

/// `at` in nanoseconds since the Unix epoch: the system clock when the process first asked,
/// moved on by the monotonic clock since, so that the proxy's spans and the host clock that
/// the kernel timeline reads (`gpu::timeline`) share one scale.
pub(crate) fn epoch_nanos(at: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (instant, epoch) = *ANCHOR.get_or_init(|| (Instant::now(), SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)));
    if at >= instant {
        epoch + (at - instant).as_nanos() as u64
    } else {
        epoch.saturating_sub((instant - at).as_nanos() as u64)
    }
}

/// `text` as a JSON string.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_timeline_is_a_chrome_trace_of_its_tracks_and_spans() {
        let dir = std::env::temp_dir().join(format!("oxccl-trace-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let recorder = Recorder::new(dir.join("t").to_str().unwrap(), 7, 3).unwrap();
        let track = recorder.track("send to rank \"1\" channel 0".into());
        let t0 = Instant::now();
        recorder.span(track, "send", t0, t0 + Duration::from_micros(12), 4, 1, 64);
        recorder.write().unwrap();
        recorder.write().unwrap();
        let text = std::fs::read_to_string(&recorder.file).unwrap();
        assert!(recorder.file.to_str().unwrap().ends_with(&format!(".pid{}.comm7.rank3.json", std::process::id())));
        assert!(text.starts_with("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[") && text.trim_end().ends_with("]}"), "{text}");
        assert!(text.contains("\"name\":\"send to rank \\\"1\\\" channel 0\""), "{text}");
        let (begin, end) = (epoch_nanos(t0), epoch_nanos(t0 + Duration::from_micros(12)));
        assert_eq!(end - begin, 12_000);
        let args = format!("\"dur\":12.000,\"args\":{{\"number\":4,\"begin_ns\":{begin},\"end_ns\":{end},\"messages\":1,\"bytes\":64}}");
        assert!(text.contains("\"name\":\"send\",\"pid\":3,\"tid\":0,") && text.contains(&args), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = Recorder::new(dir.join("gone/t").to_str().unwrap(), 7, 3).err().expect("a directory that does not exist");
        assert!(missing.to_string().contains("gone/t.pid") && missing.to_string().contains("No such file"), "{missing}");
    }
}
