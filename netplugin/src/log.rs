//! The plugin's log lines through the logger NCCL passes to `init`: a `tracing` layer,
//! installed as this library's own global subscriber (the library has its own copy of
//! `tracing`, so this touches no other library's logs), turns each event into one logger
//! call, on NCCL's NET subsystem (and INIT for initialization lines). NCCL filters them
//! with `NCCL_DEBUG` and `NCCL_DEBUG_SUBSYS` as it filters its own.

use std::ffi::{c_int, CString};
use std::fmt::Write;
use std::sync::{Once, OnceLock};

use oxccl_transports::net::plugin::abi::{level, subsystem, Logger};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// NCCL's logger, from the first `init` that passed one.
static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sends this library's `tracing` events to `logger` from now on (the first non-NULL
/// logger wins: NCCL passes the same one to every `init`).
pub fn install(logger: Logger) {
    if logger.is_none() {
        return;
    }
    let _ = LOGGER.set(logger);
    // Every caller waits here until the subscriber is in place: a second `init` racing
    // the first must not log (and lose) its lines before it is.
    static SUBSCRIBER: Once = Once::new();
    SUBSCRIBER.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(ToNccl));
    });
}

struct ToNccl;

impl<S: Subscriber> Layer<S> for ToNccl {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let Some(Some(logger)) = LOGGER.get() else { return };
        let metadata = event.metadata();
        let nccl_level = match *metadata.level() {
            Level::ERROR | Level::WARN => level::WARN,
            Level::INFO => level::INFO,
            _ => level::TRACE,
        };
        let flags = if metadata.target().ends_with("::init") { subsystem::INIT | subsystem::NET } else { subsystem::NET };
        let mut text = String::from("NET/oxccl: ");
        event.record(&mut Message(&mut text));
        let text = c_string(text);
        let file = c_string(metadata.file().unwrap_or("").to_string());
        let line = metadata.line().and_then(|line| c_int::try_from(line).ok()).unwrap_or(0);
        // SAFETY: NCCL's logger takes a printf format; "%s" with one NUL-terminated string.
        unsafe { logger(nccl_level, flags, file.as_ptr(), line, c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// A C string of `text`, NULs shown as spaces (they cannot cross).
fn c_string(text: String) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

/// An event's message, then its other fields as `name=value`.
struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = if field.name() == "message" { write!(self.0, "{value:?}") } else { write!(self.0, " {}={value:?}", field.name()) };
    }
}
