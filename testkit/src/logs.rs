//! Log lines captured in a test: the `tracing` events of the calling thread while a closure
//! runs, each as one `LEVEL target message` line.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// The lines captured so far.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<String>>>);

impl CapturedLogs {
    /// Runs `f`, capturing the events it emits on this thread; answers its result.
    pub fn during<R>(&self, f: impl FnOnce() -> R) -> R {
        tracing::subscriber::with_default(tracing_subscriber::registry().with(self.clone()), f)
    }

    /// Every line so far, as `LEVEL target message`.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Whether a line of `level` on `target` contains `text`.
    pub fn has(&self, level: &str, target: &str, text: &str) -> bool {
        self.lines().iter().any(|line| line.starts_with(&format!("{level} {target} ")) && line.contains(text))
    }
}

impl<S: Subscriber> Layer<S> for CapturedLogs {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        struct Text<'a>(&'a mut String);
        impl Visit for Text<'_> {
            fn record_debug(&mut self, _field: &Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{value:?}"));
            }
        }
        let mut line = format!("{} {} ", event.metadata().level(), event.metadata().target());
        event.record(&mut Text(&mut line));
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(line);
    }
}
