//! How many helper threads and data sockets a socket comm uses: NCCL_SOCKET_NTHREADS and
//! NCCL_NSOCKS_PERTHREAD, with NCCL's limits and its cloud defaults.

/// Most helper threads per comm (NCCL's MAX_THREADS).
pub const MAX_THREADS: usize = 16;
/// Most data sockets per comm, threads × sockets per thread (NCCL's MAX_SOCKETS).
pub const MAX_DATA_SOCKETS: usize = 64;
/// Data sockets per helper thread where nothing says otherwise.
const DEFAULT_SOCKETS_PER_THREAD: usize = 1;
/// Cores a host needs for its comms to get a helper thread where nothing says otherwise
/// (and [`StreamSettings::helpers_by_default`]). With two, the ranks' own threads and the
/// proxy threads already have both: a helper per comm made the socket net slower there
/// (docs/NET.md); with more, it moves the copies off the thread that calls `test` and runs
/// each comm's on its own core.
pub const MIN_CORES_FOR_HELPERS: usize = 4;

/// NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD as set; `None`: the automatic choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSettings {
    pub threads: Option<usize>,
    pub sockets_per_thread: Option<usize>,
    /// Whether a comm gets a helper thread where nothing says otherwise (on a host of
    /// [`MIN_CORES_FOR_HELPERS`] cores or more, away from NCCL's cloud NICs): yes where one
    /// thread of the rank calls `test` for all its comms (NCCL's proxy thread, through the
    /// plugin), no where several threads a rank do (oxccl's proxy threads, which then copy
    /// every byte themselves: faster on 16 and 32 cores, docs/NET.md).
    pub helpers_by_default: bool,
}

impl Default for StreamSettings {
    /// Both unset, a helper thread by default.
    fn default() -> StreamSettings {
        StreamSettings { threads: None, sockets_per_thread: None, helpers_by_default: true }
    }
}

/// How a comm moves its data: `sockets` data sockets served by `threads` helper threads,
/// the same number on each; none of either when the control socket carries everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streams {
    pub threads: usize,
    pub sockets: usize,
}

impl Streams {
    /// Within the limits, and each thread with the same number of sockets.
    pub(super) fn is_valid(&self) -> bool {
        match (self.threads, self.sockets) {
            (0, 0) => true,
            (0, _) | (_, 0) => false,
            (threads, sockets) => threads <= MAX_THREADS && sockets <= MAX_DATA_SOCKETS && sockets % threads == 0,
        }
    }
}

impl StreamSettings {
    /// NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD of `config`.
    pub fn from_config(config: &oxccl_bootstrap::Config) -> StreamSettings {
        StreamSettings { threads: config.socket_threads, sockets_per_thread: config.socks_per_thread, ..StreamSettings::default() }
    }

    /// The same settings, with no helper thread where nothing says otherwise but a cloud NIC
    /// ([`StreamSettings::helpers_by_default`]).
    pub fn without_default_helpers(self) -> StreamSettings {
        StreamSettings { helpers_by_default: false, ..self }
    }

    /// The streams of a device whose PCI vendor is `vendor` (sysfs's `0x1d0f`) on a host of
    /// `cores` cores, and a warning for each value lowered to NCCL's limits. Unset values
    /// are NCCL's cloud defaults (AWS: 2 threads × 8 sockets, Google Cloud's gVNIC: 4 × 1),
    /// else 1 × 1 with at least [`MIN_CORES_FOR_HELPERS`] cores and helpers by default, and
    /// none otherwise; a value set
    /// is kept and the other one taken from there, as NCCL does.
    pub fn resolve(&self, vendor: Option<&str>, cores: usize) -> (Streams, Vec<String>) {
        let (cloud_threads, cloud_sockets) = match vendor {
            Some("0x1d0f") => (2, 8),
            Some("0x1ae0") => (4, 1),
            _ => (usize::from(self.helpers_by_default && cores >= MIN_CORES_FOR_HELPERS), DEFAULT_SOCKETS_PER_THREAD),
        };
        let mut warnings = Vec::new();
        let mut threads = self.threads.unwrap_or(cloud_threads);
        if threads > MAX_THREADS {
            warnings.push(format!("NCCL_SOCKET_NTHREADS={threads} is more than {MAX_THREADS}: using {MAX_THREADS}"));
            threads = MAX_THREADS;
        }
        let mut per_thread = self.sockets_per_thread.unwrap_or(cloud_sockets);
        if threads == 0 || per_thread == 0 {
            return (Streams { threads: 0, sockets: 0 }, warnings);
        }
        if threads.saturating_mul(per_thread) > MAX_DATA_SOCKETS {
            let lowered = MAX_DATA_SOCKETS / threads;
            warnings.push(format!("NCCL_SOCKET_NTHREADS={threads} x NCCL_NSOCKS_PERTHREAD={per_thread} is more than {MAX_DATA_SOCKETS} sockets: using {lowered} per thread"));
            per_thread = lowered;
        }
        (Streams { threads, sockets: threads * per_thread }, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a host of 16 cores (the GPU machines').
    fn resolve(threads: Option<usize>, sockets_per_thread: Option<usize>, vendor: Option<&str>) -> ((usize, usize), Vec<String>) {
        let (streams, warnings) = StreamSettings { threads, sockets_per_thread, ..StreamSettings::default() }.resolve(vendor, 16);
        ((streams.threads, streams.sockets), warnings)
    }

    #[test]
    fn unset_values_are_the_defaults_or_nccls_cloud_ones() {
        assert_eq!(resolve(None, None, None), ((1, 1), vec![]));
        assert_eq!(resolve(None, None, Some("0x15b3")), resolve(None, None, None));
        // Too few cores for helpers of their own, unless asked for, or a cloud's NIC.
        let unset = StreamSettings::default();
        assert_eq!(unset.resolve(None, MIN_CORES_FOR_HELPERS - 1).0, Streams { threads: 0, sockets: 0 });
        assert_eq!(unset.resolve(None, MIN_CORES_FOR_HELPERS).0, Streams { threads: 1, sockets: 1 });
        assert_eq!(StreamSettings { threads: Some(2), ..unset }.resolve(None, 2).0, Streams { threads: 2, sockets: 2 });
        assert_eq!(unset.resolve(Some("0x1d0f"), 2).0, Streams { threads: 2, sockets: 16 });
        assert_eq!(resolve(None, None, Some("0x1d0f")), ((2, 16), vec![]));
        assert_eq!(resolve(None, None, Some("0x1ae0")), ((4, 4), vec![]));
        // One value set, the other automatic: as NCCL combines them.
        assert_eq!(resolve(Some(4), None, Some("0x1d0f")), ((4, 32), vec![]));
        assert_eq!(resolve(None, Some(2), Some("0x1ae0")), ((4, 8), vec![]));
    }

    #[test]
    fn without_default_helpers_unset_values_are_none_but_on_a_cloud_nic_or_when_set() {
        let runtime = StreamSettings::default().without_default_helpers();
        assert_eq!(runtime.resolve(None, 32).0, Streams { threads: 0, sockets: 0 });
        assert_eq!(runtime.resolve(Some("0x1d0f"), 32).0, Streams { threads: 2, sockets: 16 });
        assert_eq!(StreamSettings { sockets_per_thread: Some(2), ..runtime }.resolve(None, 32).0, Streams { threads: 0, sockets: 0 });
        assert_eq!(StreamSettings { threads: Some(1), ..runtime }.resolve(None, 32).0, Streams { threads: 1, sockets: 1 });
    }

    #[test]
    fn zero_means_no_helpers_and_no_data_sockets() {
        assert_eq!(resolve(Some(0), Some(8), None).0, (0, 0));
        assert_eq!(resolve(Some(4), Some(0), None).0, (0, 0));
        assert!(Streams { threads: 0, sockets: 0 }.is_valid());
    }

    #[test]
    fn values_beyond_nccls_limits_are_lowered_with_a_warning() {
        let ((threads, sockets), warnings) = resolve(Some(40), Some(1), None);
        assert_eq!((threads, sockets), (16, 16));
        assert!(warnings[0].contains("NCCL_SOCKET_NTHREADS=40") && warnings[0].contains("using 16"), "{warnings:?}");
        let ((threads, sockets), warnings) = resolve(Some(3), Some(30), None);
        assert_eq!((threads, sockets), (3, 63));
        assert!(warnings[0].contains("NCCL_NSOCKS_PERTHREAD=30") && warnings[0].contains("using 21 per thread"), "{warnings:?}");
        assert_eq!(resolve(Some(4), Some(usize::MAX), None).0, (4, 64));
        assert_eq!(resolve(Some(4), Some(4), None), ((4, 16), vec![]));
    }

    #[test]
    fn handles_carry_only_valid_streams() {
        assert!(Streams { threads: 4, sockets: 16 }.is_valid());
        for (threads, sockets) in [(0, 4), (4, 0), (17, 17), (4, 68), (3, 4)] {
            assert!(!Streams { threads, sockets }.is_valid(), "{threads} x {sockets}");
        }
    }
}
