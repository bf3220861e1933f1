//! nccl-tests' tables, as the `*_perf` binaries of NVIDIA's nccl-tests print them and as
//! oxccl-perf prints them (the same columns, then a baseline's time, busbw and ratio).
//!
//! A table is found by its column header (`#  size  count  type  redop  root  time  algbw
//! busbw  #wrong  time ...`); every later line whose first field is a whole number is a
//! row and must hold every column the header names. Other lines — `#` comments, NCCL's
//! `INFO`/`WARN` lines, a launcher's messages — are not rows and are skipped, except the
//! comments that say what was measured (the collective, the ranks and their GPUs, the
//! baseline), which are read for the picture's title.

use super::distinct;
use crate::{Error, Result};

/// One table: its rows and what its comments say about the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Where the table came from (a file name), for messages.
    pub origin: String,
    /// The program that printed it: "nccl-tests 2.19.6", "oxccl-perf".
    pub tool: Option<String>,
    /// The collective, as nccl-tests names its binaries without `_perf` (`all_reduce`).
    pub collective: Option<String>,
    /// How many ranks took part.
    pub ranks: Option<usize>,
    /// The machine, as far as the comments tell: GPUs and host, or host and CPU memory.
    pub machine: Option<String>,
    /// The baseline measured in the same run (oxccl-perf's `--baseline`): "NCCL 2.28.3", "MPI".
    pub baseline: Option<String>,
    /// The times are the host's CPU time per call (nccl-tests `-C 1`: its `cputime`
    /// columns), not the GPU's.
    pub cpu_time: bool,
    /// The rows, in the file's order.
    pub rows: Vec<Row>,
}

/// One row: one message size.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The row's line in its file, 1-based.
    pub line: usize,
    /// Message size in bytes (nccl-tests' `size`).
    pub bytes: u64,
    /// Elements (nccl-tests' `count`).
    pub count: u64,
    /// Datatype (`float`, `bfloat16`, ...).
    pub dtype: String,
    /// Reduction (`sum`, ...; `none` where the collective does not reduce).
    pub op: String,
    /// Root rank, -1 where there is none (absent from old tables without the column).
    pub root: Option<i64>,
    /// The out-of-place columns.
    pub out_of_place: Measurement,
    /// The in-place columns; `None` where the table says N/A.
    pub in_place: Option<Measurement>,
    /// The baseline's columns (oxccl-perf `--baseline`): time and busbw, no algbw or check.
    pub baseline: Option<Measurement>,
}

/// One placement's columns of a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Time per call, microseconds.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (size / time); `None` for a baseline, which omits it.
    pub algbw: Option<f64>,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements of the checked call; `None` where unchecked (`N/A`, `-`).
    pub wrong: Option<u64>,
}

/// Which columns a header announced.
#[derive(Clone, Debug, PartialEq)]
struct Layout {
    /// A `root` column after `redop`.
    root: bool,
    /// Placements (time algbw busbw #wrong groups): 1 or 2.
    placements: usize,
    /// The baseline's column name (`nccl`, `mpi`) if the table has one.
    baseline: Option<String>,
    /// The time columns are `cputime` (nccl-tests `-C 1`).
    cpu_time: bool,
}

impl Layout {
    /// Columns a row of this layout has.
    fn columns(&self) -> usize {
        4 + usize::from(self.root) + 4 * self.placements + if self.baseline.is_some() { 3 } else { 0 }
    }

    /// The layout a `#` comment announces, `None` if it is not a column header (its first
    /// word is not `size`), or an error naming what differs from nccl-tests' header.
    fn from_header(comment: &str, origin: &str, line: usize) -> Result<Option<Layout>> {
        let words: Vec<&str> = comment.split_whitespace().collect();
        if words.first() != Some(&"size") {
            return Ok(None);
        }
        let bad = |what: String| Error::Line { origin: origin.into(), line, what };
        let expected = "nccl-tests' columns: size count type redop root, then time (or cputime) algbw busbw #wrong for out-of-place and in-place, then optionally a baseline's `<name> <name> ratio`";
        if words.get(1..4) != Some(&["count", "type", "redop"][..]) {
            return Err(bad(format!("a column header that is not nccl-tests' ({expected})")));
        }
        let root = words.get(4) == Some(&"root");
        let mut rest = &words[4 + usize::from(root)..];
        let (mut placements, mut times) = (0, Vec::new());
        while let [time @ ("time" | "cputime"), "algbw", "busbw", "#wrong", tail @ ..] = rest {
            placements += 1;
            times.push(*time);
            rest = tail;
        }
        if times.windows(2).any(|w| w[0] != w[1]) {
            return Err(bad(format!("time columns of two kinds ({}) in the header ({expected})", times.join(", "))));
        }
        let cpu_time = times.first() == Some(&"cputime");
        let baseline = match rest {
            [] => None,
            [name, again, "ratio"] if name == again => Some(name.to_string()),
            _ => return Err(bad(format!("unknown columns {:?} in the header ({expected})", rest.join(" ")))),
        };
        if !(1..=2).contains(&placements) {
            return Err(bad(format!("{placements} groups of `time algbw busbw #wrong` columns in the header ({expected})")));
        }
        Ok(Some(Layout { root, placements, baseline, cpu_time }))
    }
}

impl Table {
    /// Reads the table in `text`; `origin` (a file name) names it in errors.
    ///
    /// Errors: no column header, no row, more than one table, or a row that is not the
    /// header's (a missing column, a number that is not one) — naming the line.
    pub fn parse(text: &str, origin: &str) -> Result<Table> {
        let mut table = Table { origin: origin.into(), tool: None, collective: None, ranks: None, machine: None, baseline: None, cpu_time: false, rows: Vec::new() };
        let mut about = About::default();
        let mut layout: Option<(usize, Layout)> = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if let Some(comment) = line.strip_prefix('#') {
                match Layout::from_header(comment, origin, number)? {
                    Some(_) if layout.is_some() => {
                        let first = layout.as_ref().map_or(0, |(at, _)| *at);
                        return Err(Error::Line { origin: origin.into(), line: number, what: format!("a second table begins here (the first at line {first}): give one table per file") });
                    }
                    Some(found) => layout = Some((number, found)),
                    None => about.read(comment),
                }
                continue;
            }
            // A row begins with its size; anything else here is another program's output.
            if line.split_whitespace().next().is_none_or(|first| first.parse::<u64>().is_err()) {
                continue;
            }
            let Some((_, layout)) = &layout else {
                return Err(Error::Line { origin: origin.into(), line: number, what: "a row before any column header (`#  size  count  type ...`)".into() });
            };
            table.rows.push(parse_row(line, layout, origin, number)?);
        }
        let Some((header, layout)) = layout else {
            return Err(Error::File { origin: origin.into(), what: "no nccl-tests table here: no column header (`#  size  count  type  redop  root  time  algbw  busbw  #wrong ...`)".into() });
        };
        if table.rows.is_empty() {
            return Err(Error::File { origin: origin.into(), what: format!("the table whose header is at line {header} has no rows (did the run fail before its first size?)") });
        }
        table.cpu_time = layout.cpu_time;
        table.machine = about.machine();
        table.ranks = about.ranks.or((!about.rank_devices.is_empty()).then_some(about.rank_devices.len()));
        table.tool = about.tool;
        table.collective = about.collective;
        table.baseline = layout.baseline.map(|column| match about.baseline.filter(|b| b != "none") {
            Some(b) if b == "mpi" => "MPI".to_string(),
            Some(b) => b,
            None => column.to_uppercase(),
        });
        Ok(table)
    }
}

/// What a table's comments say about its run.
#[derive(Default)]
struct About {
    tool: Option<String>,
    collective: Option<String>,
    ranks: Option<usize>,
    baseline: Option<String>,
    /// nccl-tests' `Rank r ... on <host> device <d> [<bus id>] <name>`: (host, bus id, name).
    rank_devices: Vec<(String, String, String)>,
    /// oxccl-perf on GPUs: `rank r on GPU g`, the GPUs.
    gpus: Vec<String>,
    /// oxccl-perf on CPU memory: `<host> on <arch>, <n> ranks, CPU memory, ...`.
    cpu_host: Option<String>,
    /// oxccl-perf `--separate-hosts`.
    separate_hosts: bool,
}

impl About {
    /// Takes what one comment (without its `#`) says.
    fn read(&mut self, comment: &str) {
        let words: Vec<&str> = comment.split_whitespace().collect();
        match words.as_slice() {
            ["nccl-tests", "version", version, ..] => self.tool = Some(format!("nccl-tests {version}")),
            ["Collective", "test", "starting:", binary] => self.collective = Some(binary.trim_end_matches("_perf").to_string()),
            ["oxccl-perf", collective, ..] if !collective.starts_with('-') => {
                self.tool = Some("oxccl-perf".into());
                self.collective = Some(collective.trim_end_matches(':').to_string());
                self.ranks = words.iter().position(|w| *w == "nranks").and_then(|at| words.get(at + 1)).and_then(|n| n.parse().ok());
                self.baseline = comment.split_once("baseline: ").map(|(_, b)| b.trim().to_string());
            }
            ["Rank", _, "Group", ..] => {
                // `Rank  0 Group  0 Pid 6511 on vm device  0 [0000:00:06] NVIDIA H100 80GB HBM3`
                let Some(on) = words.iter().position(|w| *w == "on") else { return };
                let host = words.get(on + 1).copied().unwrap_or_default();
                let bus = words.get(on + 4).copied().unwrap_or_default();
                let name = words.get(on + 5..).map(|w| w.join(" ")).unwrap_or_default();
                self.rank_devices.push((host.into(), bus.into(), name));
            }
            ["rank", _, "on", "GPU", gpu] => self.gpus.push(gpu.to_string()),
            [host, "on", _arch, ..] if comment.contains(" ranks, CPU memory") => self.cpu_host = Some(host.to_string()),
            ["every", "rank", "claims", "a", "host", ..] => self.separate_hosts = true,
            _ => {}
        }
    }

    /// The machine in a few words: "1 GPU (NVIDIA H100 80GB HBM3) on vm", "2 GPUs",
    /// "CPU memory on vm".
    fn machine(&self) -> Option<String> {
        let hosts_note = if self.separate_hosts { ", each rank posing as a host" } else { "" };
        if !self.rank_devices.is_empty() {
            let gpus = distinct(self.rank_devices.iter().map(|(host, bus, _)| format!("{host} {bus}")));
            let names = distinct(self.rank_devices.iter().map(|(_, _, name)| name.clone()));
            let hosts = distinct(self.rank_devices.iter().map(|(host, _, _)| host.clone()));
            return Some(format!("{} GPU{} ({}) on {}", gpus.len(), plural(gpus.len()), names.join(", "), hosts.join(", ")));
        }
        if !self.gpus.is_empty() {
            let gpus = distinct(self.gpus.iter().cloned());
            return Some(format!("{} GPU{}{hosts_note}", gpus.len(), plural(gpus.len())));
        }
        self.cpu_host.as_ref().map(|host| format!("CPU memory on {host}{hosts_note}"))
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One row of `layout` from `line` (trimmed), or an error naming the column at fault.
fn parse_row(line: &str, layout: &Layout, origin: &str, line_number: usize) -> Result<Row> {
    let bad = |what: String| Error::Line { origin: origin.into(), line: line_number, what };
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() != layout.columns() {
        // NCCL_DEBUG=INFO's lines land inside nccl-tests' rows, which it prints in pieces.
        let hint = if line.contains(" NCCL INFO ") || line.contains(" NCCL WARN ") { " (NCCL's log is interleaved with the row: send it elsewhere with NCCL_DEBUG_FILE)" } else { "" };
        return Err(bad(format!("a row of {} columns where the header announces {}{hint}: {line:?}", fields.len(), layout.columns())));
    }
    let whole = |at: usize, name: &str| fields[at].parse::<u64>().map_err(|_| bad(format!("{name} {:?} is not a whole number", fields[at])));
    let bytes = whole(0, "size")?;
    let count = whole(1, "count")?;
    let root = match layout.root {
        true => Some(fields[4].parse::<i64>().map_err(|_| bad(format!("root {:?} is not a rank", fields[4])))?),
        false => None,
    };
    let mut at = 4 + usize::from(layout.root);
    let mut placements = Vec::new();
    for placement in ["out-of-place", "in-place"].into_iter().take(layout.placements) {
        placements.push(parse_measurement(&fields[at..at + 4], placement).map_err(&bad)?);
        at += 4;
    }
    let out_of_place = placements[0].ok_or_else(|| bad("the out-of-place columns say N/A: nothing was measured".into()))?;
    let in_place = placements.get(1).copied().flatten();
    let baseline = match &layout.baseline {
        Some(name) => {
            let time_us = number(fields[at], &format!("{name} time"), true).map_err(&bad)?;
            let busbw = number(fields[at + 1], &format!("{name} busbw"), false).map_err(&bad)?;
            // A row of 0 bytes has no bandwidth to compare: oxccl-perf printed its ratio as
            // NaN (0 / 0) until it compared times instead.
            if !(bytes == 0 && fields[at + 2] == "NaN") {
                number(fields[at + 2], "ratio", false).map_err(&bad)?;
            }
            Some(Measurement { time_us, algbw: None, busbw, wrong: None })
        }
        None => None,
    };
    Ok(Row { line: line_number, bytes, count, dtype: fields[2].into(), op: fields[3].into(), root, out_of_place, in_place, baseline })
}

/// `time algbw busbw #wrong`, or `None` where all four are N/A.
fn parse_measurement(fields: &[&str], placement: &str) -> Result<Option<Measurement>, String> {
    if fields.iter().all(|f| *f == "N/A") {
        return Ok(None);
    }
    let time_us = number(fields[0], &format!("{placement} time"), true)?;
    let algbw = number(fields[1], &format!("{placement} algbw"), false)?;
    let busbw = number(fields[2], &format!("{placement} busbw"), false)?;
    let wrong = match fields[3] {
        "N/A" | "-" => None,
        w => Some(w.parse::<u64>().map_err(|_| format!("{placement} #wrong {w:?} is neither a count nor N/A"))?),
    };
    Ok(Some(Measurement { time_us, algbw: Some(algbw), busbw, wrong }))
}

/// A finite, non-negative number (a time must be positive: nothing takes no time).
fn number(text: &str, name: &str, positive: bool) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (v > 0.0 || (!positive && v == 0.0)) => Ok(v),
        Ok(_) if positive => Err(format!("{name} {text:?} is not a positive number")),
        _ => Err(format!("{name} {text:?} is not a number of at least 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head and two rows of a real nccl-tests table
    /// (docs/results/2026-11-25-h100x1-net/net/net-2r-all_reduce-oxccl.txt).
    const NCCL_TESTS: &str = "\
# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 4(factor) warmup iters: 5 iters: 10 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   6511 on         vm device  0 [0000:00:06] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6512 on         vm device  0 [0000:00:06] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
           8             2     float     sum      -1    26.24    0.00    0.00       0    24.88    0.00    0.00       0
   134217728      33554432     float     sum      -1  20821.8    6.45    6.45       0  20958.1    6.40    6.40       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 2.42495 
#
# Collective test concluded: all_reduce_perf
";

    /// oxccl-perf on GPUs with its NCCL baseline
    /// (docs/results/2026-11-23-h200x2-fifth/3-channels/perf-sendrecv-2gpu-staged.txt).
    const OXCCL_PERF: &str = "\
# oxccl-perf sendrecv on GPUs: nranks 2 minBytes 8 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 validation: 1 baseline: NCCL 2.28.3
#
#  rank 0 on GPU 0
#  rank 1 on GPU 1
#  every rank claims a host of its own: oxccl stages through host memory and its socket Net; NCCL runs its socket network transport (P2P and SHM disabled)
#
#                                                              out-of-place                       in-place            NCCL baseline
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong     nccl   nccl  ratio
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)            time  busbw   x
           8             2     float    none      -1    30.35    0.00    0.00      0      N/A     N/A     N/A    N/A    30.42   0.00  1.00
    67108864      16777216     float    none      -1  23026.6    2.91    2.91      -      N/A     N/A     N/A    N/A  30402.1   2.21  1.32
# Out of bounds values : 0 OK
";

    #[test]
    fn reads_an_nccl_tests_table() {
        let table = Table::parse(NCCL_TESTS, "ar.txt").unwrap();
        assert_eq!(table.tool.as_deref(), Some("nccl-tests 2.19.6"));
        assert_eq!(table.collective.as_deref(), Some("all_reduce"));
        assert_eq!(table.ranks, Some(2));
        assert_eq!(table.machine.as_deref(), Some("1 GPU (NVIDIA H100 80GB HBM3) on vm"));
        assert_eq!(table.baseline, None);
        assert_eq!(table.rows.len(), 2);
        let last = &table.rows[1];
        assert_eq!((last.line, last.bytes, last.count, last.dtype.as_str(), last.op.as_str(), last.root), (13, 134217728, 33554432, "float", "sum", Some(-1)));
        assert_eq!(last.out_of_place, Measurement { time_us: 20821.8, algbw: Some(6.45), busbw: 6.45, wrong: Some(0) });
        assert_eq!(last.in_place, Some(Measurement { time_us: 20958.1, algbw: Some(6.40), busbw: 6.40, wrong: Some(0) }));
        assert_eq!(last.baseline, None);
    }

    #[test]
    fn reads_oxccl_perf_with_its_baseline_and_missing_in_place() {
        let table = Table::parse(OXCCL_PERF, "perf.txt").unwrap();
        assert_eq!((table.tool.as_deref(), table.collective.as_deref(), table.ranks), (Some("oxccl-perf"), Some("sendrecv"), Some(2)));
        assert_eq!(table.machine.as_deref(), Some("2 GPUs, each rank posing as a host"));
        assert_eq!(table.baseline.as_deref(), Some("NCCL 2.28.3"));
        let [first, last] = table.rows.as_slice() else { panic!("two rows: {:?}", table.rows) };
        assert_eq!(first.in_place, None);
        assert_eq!(first.baseline, Some(Measurement { time_us: 30.42, algbw: None, busbw: 0.0, wrong: None }));
        assert_eq!(last.out_of_place.wrong, None, "`-`: not checked");
        assert_eq!(last.baseline.map(|b| b.busbw), Some(2.21));
    }

    /// A 0-byte row's ratio may read NaN (oxccl-perf divided two zero bandwidths there until
    /// it compared times; docs/results/2026-11-27-h200x4-acquire keeps such tables); any
    /// other row's may not.
    #[test]
    fn a_nan_ratio_passes_only_where_nothing_moved() {
        let head = OXCCL_PERF.lines().take(9).collect::<Vec<_>>().join("\n");
        let row = |size: u64| format!("{head}\n{size:>12}             0     float    none      -1     0.52    0.00    0.00      0      N/A     N/A     N/A    N/A     3.21   0.00   NaN\n");
        let table = Table::parse(&row(0), "zero.txt").unwrap();
        assert_eq!(table.rows[0].baseline.map(|b| b.time_us), Some(3.21));
        let e = Table::parse(&row(8), "eight.txt").unwrap_err().to_string();
        assert!(e.contains("ratio \"NaN\""), "{e}");
    }

    #[test]
    fn reads_oxccl_perf_on_cpu_memory_with_mpi() {
        let text = "\
# command: mpirun -np 2 target/release/oxccl-perf all_reduce -f 4 --baseline mpi
# oxccl-perf all_reduce: nranks 2 minBytes 8 maxBytes 65536 step: 4(factor) warmup iters: 50 iters: 2000 validation: 1 blocking: 1 baseline: mpi
#
# vm on x86_64, 2 ranks, CPU memory, time = slowest rank's mean
#
#                                                              out-of-place                       in-place             MPI baseline
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong      mpi   mpi ratio
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)            time busbw   x
           8             2     float     sum      -1    31.31    0.00    0.00      0    23.96    0.00    0.00      0    24.91  0.00 0.80
";
        let table = Table::parse(text, "cpu.txt").unwrap();
        assert_eq!((table.collective.as_deref(), table.ranks, table.baseline.as_deref()), (Some("all_reduce"), Some(2), Some("MPI")));
        assert_eq!(table.machine.as_deref(), Some("CPU memory on vm"));
        assert_eq!(table.rows[0].baseline.map(|b| b.time_us), Some(24.91));
    }

    #[test]
    fn skips_other_programs_lines_between_rows() {
        let text = NCCL_TESTS.replacen(
            "   134217728",
            "vm:2167:2167 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n2026-11-24T00:26:31Z  WARN oxccl::net: rank 0: slow\n   134217728",
            1,
        );
        let table = Table::parse(&text, "noisy.txt").unwrap();
        assert_eq!(table.rows.iter().map(|r| (r.line, r.bytes)).collect::<Vec<_>>(), [(12, 8), (15, 134217728)]);
    }

    /// The error for `text`, as the user reads it.
    fn error(text: &str) -> String {
        Table::parse(text, "bad.txt").unwrap_err().to_string()
    }

    #[test]
    fn bad_tables_are_named_with_file_and_line() {
        assert!(error("").starts_with("bad.txt: no nccl-tests table here"), "{}", error(""));
        assert!(error("hello\nworld\n").contains("no column header"));
        let header_only: String = NCCL_TESTS.lines().take(11).map(|l| format!("{l}\n")).collect();
        assert_eq!(error(&header_only), "bad.txt: the table whose header is at line 10 has no rows (did the run fail before its first size?)");
        let short_row = NCCL_TESTS.replace("20958.1    6.40    6.40       0", "20958.1    6.40");
        assert!(error(&short_row).starts_with("bad.txt:13: a row of 11 columns where the header announces 13"), "{}", error(&short_row));
        let bad_time = NCCL_TESTS.replace("26.24", "2x.24");
        assert_eq!(error(&bad_time), "bad.txt:12: out-of-place time \"2x.24\" is not a number of at least 0");
        let zero_time = NCCL_TESTS.replace("24.88", "0.00");
        assert_eq!(error(&zero_time), "bad.txt:12: in-place time \"0.00\" is not a positive number");
        let negative = NCCL_TESTS.replace("    6.45    6.45       0", "   -6.45    6.45       0");
        assert!(error(&negative).contains("out-of-place algbw \"-6.45\""), "{}", error(&negative));
        let bad_wrong = NCCL_TESTS.replace("6.40       0", "6.40       x");
        assert_eq!(error(&bad_wrong), "bad.txt:13: in-place #wrong \"x\" is neither a count nor N/A");
        let bad_size = NCCL_TESTS.replace("134217728      33554432", "134217728      3355443.2");
        assert!(error(&bad_size).contains("bad.txt:13: count \"3355443.2\" is not a whole number"));
        let out_na = NCCL_TESTS.replace("26.24    0.00    0.00       0", "N/A N/A N/A N/A");
        assert!(error(&out_na).contains("bad.txt:12: the out-of-place columns say N/A"));
        let twice = format!("{NCCL_TESTS}{NCCL_TESTS}");
        assert_eq!(error(&twice), "bad.txt:27: a second table begins here (the first at line 10): give one table per file");
        let row_first = format!("  8  2  float  sum  -1  1.0  0  0  0\n{NCCL_TESTS}");
        assert_eq!(error(&row_first), "bad.txt:1: a row before any column header (`#  size  count  type ...`)");
    }

    #[test]
    fn headers_other_than_nccl_tests_are_refused() {
        for (header, expected) in [
            ("#  size  bytes  type  redop  root  time  algbw  busbw  #wrong", "not nccl-tests'"),
            ("#  size  count  type  redop  root  time  algbw  busbw  error  time  algbw  busbw  error", "unknown columns \"time algbw busbw error time algbw busbw error\""),
            ("#  size  count  type  redop  root", "0 groups"),
            ("#  size  count  type  redop  root  time  algbw  busbw  #wrong  nccl  mpi  ratio", "unknown columns \"nccl mpi ratio\""),
        ] {
            let message = error(&format!("{header}\n  8  2  float  sum  -1  1.0  0  0  0\n"));
            assert!(message.starts_with("bad.txt:1: ") && message.contains(expected), "{header}: {message}");
        }
        let old = Table::parse("#  size  count  type  redop  time  algbw  busbw  #wrong\n  8  2  float  sum  1.5  0.01  0.02  N/A\n", "old.txt").unwrap();
        assert_eq!((old.rows[0].root, old.rows[0].out_of_place.busbw, old.rows[0].in_place), (None, 0.02, None));
        let mixed = error("#  size  count  type  redop  root  cputime  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n  8  2  float  sum  -1  1.0  0  0  0  1.0  0  0  0\n");
        assert!(mixed.contains("time columns of two kinds (cputime, time)"), "{mixed}");
    }

    /// nccl-tests -C 1 names its time columns `cputime` (the host's time to issue a call).
    #[test]
    fn reads_cpu_time_tables() {
        let cpu = NCCL_TESTS.replace("  time   algbw   busbw  #wrong     time", "  cputime   algbw   busbw  #wrong     cputime");
        assert_ne!(cpu, NCCL_TESTS, "the header was rewritten");
        let table = Table::parse(&cpu, "cpu.txt").unwrap();
        assert!(table.cpu_time);
        assert_eq!(table.rows[1].out_of_place.time_us, 20821.8);
        assert!(!Table::parse(NCCL_TESTS, "gpu.txt").unwrap().cpu_time);
    }
}
