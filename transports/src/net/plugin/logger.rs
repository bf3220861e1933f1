//! Plugins' log lines into oxccl's logs: the logger a plugin gets in `init` (logger.c, since
//! it is variadic) formats each line and hands it here, where it becomes a `tracing` event
//! on the target of its subsystem, so that `NCCL_DEBUG` and `NCCL_DEBUG_SUBSYS` filter it as
//! they filter oxccl's own lines.

use std::ffi::{c_char, c_int, c_ulong, CStr};
use std::sync::Once;

use super::abi::{level, subsystem, Logger};

type Sink = extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, message: *const c_char);

extern "C" {
    fn oxccl_net_plugin_set_log_sink(sink: Sink);
    fn oxccl_net_plugin_logger(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, format: *const c_char, ...);
}

/// The logger to hand a plugin.
pub(super) fn logger() -> Logger {
    static SINK: Once = Once::new();
    // SAFETY: sets logger.c's sink once, before any plugin has the logger to call.
    SINK.call_once(|| unsafe { oxccl_net_plugin_set_log_sink(sink) });
    Some(oxccl_net_plugin_logger)
}

/// One formatted line from a plugin. Never unwinds into C.
extern "C" fn sink(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, message: *const c_char) {
    let _ = std::panic::catch_unwind(|| {
        let text = |pointer: *const c_char| {
            // SAFETY: logger.c passes NUL-terminated strings (its buffer, and the plugin's
            // __FILE__) or NULL.
            (!pointer.is_null()).then(|| unsafe { CStr::from_ptr(pointer) }.to_string_lossy())
        };
        let message = text(message).unwrap_or_default();
        let place = text(file).map(|file| format!(" ({file}:{line})")).unwrap_or_default();
        emit(level, flags, &format!("NET/Plugin: {message}{place}"));
    });
}

/// Emits `text` at the tracing level of the plugin's level, on the target of the first of
/// NET, INIT, ENV, PROXY among its subsystems (NET if none): tracing wants both constant.
fn emit(plugin_level: c_int, flags: c_ulong, text: &str) {
    macro_rules! at {
        ($target:literal) => {
            match plugin_level {
                level::ABORT => tracing::error!(target: $target, "{text}"),
                level::WARN => tracing::warn!(target: $target, "{text}"),
                level::INFO | level::VERSION => tracing::info!(target: $target, "{text}"),
                level::TRACE => tracing::trace!(target: $target, "{text}"),
                _ => {}
            }
        };
    }
    if flags & subsystem::NET != 0 {
        at!("oxccl::net")
    } else if flags & subsystem::INIT != 0 {
        at!("oxccl::init")
    } else if flags & subsystem::ENV != 0 {
        at!("oxccl::env")
    } else if flags & subsystem::PROXY != 0 {
        at!("oxccl::proxy")
    } else {
        at!("oxccl::net")
    }
}
