//! `ncclResult_t` and the last-error text.

use std::cell::RefCell;
use std::ffi::CString;

use oxccl_runtime::Error;

/// `ncclResult_t`.
pub type NcclResult = i32;

pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;
pub const REMOTE_ERROR: NcclResult = 6;
pub const IN_PROGRESS: NcclResult = 7;
pub const TIMEOUT: NcclResult = 8;

/// A failed call: its code and the text `ncclGetLastError` returns.
#[derive(Debug, Clone)]
pub struct Failure {
    pub code: NcclResult,
    pub message: String,
}

impl Failure {
    pub fn argument(message: impl Into<String>) -> Failure {
        Failure { code: INVALID_ARGUMENT, message: message.into() }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: INVALID_USAGE, message: message.into() }
    }

    pub fn unimplemented(call: &str) -> Failure {
        Failure::usage(format!("{call} is not implemented by oxccl yet"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure { code: code_of(&e), message: e.to_string() }
    }
}

impl From<oxccl_runtime::bootstrap::Error> for Failure {
    fn from(e: oxccl_runtime::bootstrap::Error) -> Failure {
        Failure::from(Error::from(e))
    }
}

impl From<oxccl_kernels::Error> for Failure {
    fn from(e: oxccl_kernels::Error) -> Failure {
        Failure::argument(e.to_string())
    }
}

/// The `ncclResult_t` an error maps to.
pub fn code_of(e: &Error) -> NcclResult {
    match e {
        Error::InvalidArgument { .. } => INVALID_ARGUMENT,
        Error::InvalidUsage { .. } => INVALID_USAGE,
        Error::PeerFailed { .. } | Error::Aborted { .. } => REMOTE_ERROR,
        Error::Timeout { .. } => TIMEOUT,
        Error::InProgress { .. } => IN_PROGRESS,
        Error::Transport { .. } | Error::Bootstrap { .. } => SYSTEM_ERROR,
        Error::Cuda { .. } => UNHANDLED_CUDA_ERROR,
        _ => INTERNAL_ERROR,
    }
}

thread_local! {
    /// The last failure on this thread (`ncclGetLastError(NULL)`, and any comm's).
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub fn set_last(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = text);
}

/// The last error text of this thread; valid until this thread's next failing call.
pub fn last() -> *const std::ffi::c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// `ncclGetErrorString`'s texts, static.
pub fn describe(code: NcclResult) -> &'static std::ffi::CStr {
    match code {
        0 => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => c"internal error - please report this issue to the oxccl developers",
        4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        8 => c"operation timed out",
        _ => c"unknown result code",
    }
}

/// Runs an export's body: catches panics, records failures, returns the code.
pub fn guard(call: &str, body: impl FnOnce() -> Result<(), Failure>) -> NcclResult {
    crate::exports::ensure_logging();
    // NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=CALL lists every call a program makes.
    tracing::trace!(target: "oxccl::call", "{call}");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    let failure = match outcome {
        Ok(Ok(())) => return SUCCESS,
        Ok(Err(f)) => f,
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
            Failure { code: INTERNAL_ERROR, message: format!("internal error (a panic, caught before the C boundary): {what}") }
        }
    };
    let message = format!("{call}: {}", failure.message);
    if failure.code != IN_PROGRESS {
        tracing::warn!(target: "oxccl::call", "{message}");
    }
    set_last(&message);
    failure.code
}
