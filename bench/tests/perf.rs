//! oxccl-perf as users run it: its own ranks, every collective, checked results, bad
//! arguments, and the MPI baseline under mpirun.

use std::process::{Command, Output};
use std::time::Duration;

use oxccl_testkit::run;

fn perf(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl-perf"));
    cmd.args(args).env("NCCL_SOCKET_IFNAME", "lo").env("OXCCL_COLL_TIMEOUT_MS", "60000");
    run(cmd, Duration::from_secs(300))
}

/// The table's data rows: (size, count, #wrong out of place, #wrong in place or N/A).
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

fn assert_ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{what}: {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{what}:\n{stdout}");
    stdout
}

#[test]
fn all_reduce_table_has_every_size_and_no_wrong_element() {
    let out = perf(&["all_reduce", "-b", "8", "-e", "64K", "-f", "8", "--nranks", "3", "-n", "3", "-w", "1"]);
    let stdout = assert_ok(&out, "all_reduce");
    let rows = rows(&stdout);
    let sizes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["8", "64", "512", "4096", "32768", "65536"], "{stdout}");
    for r in &rows {
        // size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        assert_eq!(r.len(), 13, "{r:?}");
        assert_eq!((r[2].as_str(), r[3].as_str(), r[4].as_str()), ("float", "sum", "-1"));
        assert_eq!((r[8].as_str(), r[12].as_str()), ("0", "0"), "{r:?}");
        let (time, algbw): (f64, f64) = (r[5].parse().unwrap(), r[6].parse().unwrap());
        assert!(time > 0.0 && algbw >= 0.0, "{r:?}");
    }
}

#[test]
fn every_collective_runs_checked() {
    for name in ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall", "gather", "scatter", "alltoall_grouped"] {
        let out = perf(&[name, "-b", "1K", "-e", "256K", "-f", "16", "--nranks", "2", "-n", "2", "-w", "1", "-r", "1", "-d", "bfloat16", "-o", "max"]);
        let stdout = assert_ok(&out, name);
        assert_eq!(rows(&stdout).len(), 3, "{name}:\n{stdout}");
    }
}

/// A table may start at 0 bytes (nccl-tests' -b 0): the row after it is 1 byte, not 0
/// again forever.
#[test]
fn a_table_from_zero_bytes_goes_on_to_the_largest() {
    let out = perf(&["alltoall_grouped", "-b", "0", "-e", "512", "-f", "8", "--nranks", "2", "-n", "1", "-w", "0"]);
    let stdout = assert_ok(&out, "alltoall_grouped from 0 bytes");
    let sizes: Vec<String> = rows(&stdout).iter().map(|r| r[0].clone()).collect();
    // Rows of 0, 1 (no whole element a rank), 8, 64 and 512 bytes.
    assert_eq!(sizes, ["0", "0", "8", "64", "512"], "{stdout}");
}

#[test]
fn bad_arguments_are_named() {
    for (args, expected) in [
        (vec!["allreduce_wrong"], "unknown collective"),
        (vec!["all_reduce", "-d", "float7"], "unknown datatype"),
        (vec!["all_reduce", "-o", "xor"], "unknown op"),
        (vec!["all_reduce", "-b", "1M", "-e", "1K"], "larger than"),
        (vec!["all_reduce", "-b", "12Q"], "size suffix"),
        (vec!["broadcast", "-r", "9", "--nranks", "2"], "root 9 out of range"),
        (vec!["all_reduce", "--baseline", "mpi"], "mpirun"),
        (vec!["all_reduce", "--baseline", "gloo"], "unknown baseline"),
        (vec!["all_reduce", "--svg", "/nonexistent-folder/x.svg"], "--svg /nonexistent-folder/x.svg: the folder /nonexistent-folder does not exist"),
    ] {
        let out = perf(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[cfg(feature = "mpi")]
#[test]
fn mpi_baseline_under_mpirun() {
    let mut cmd = oxccl_testkit::mpirun(2, std::path::Path::new(env!("CARGO_BIN_EXE_oxccl-perf")), &[]);
    let svg = std::env::temp_dir().join(format!("oxccl-perf-mpi-{}.svg", std::process::id()));
    cmd.args(["all_reduce", "-b", "1K", "-e", "1M", "-f", "32", "-n", "5", "-w", "1", "--baseline", "mpi", "--svg", svg.to_str().unwrap()]);
    let out = run(cmd, Duration::from_secs(300));
    let stdout = assert_ok(&out, "mpirun --baseline mpi");
    assert!(stdout.contains("MPI baseline"), "{stdout}");
    for r in rows(&stdout) {
        // ... then the baseline: mpi time, mpi busbw, ratio.
        assert_eq!(r.len(), 16, "{r:?}");
        assert!(r[15].parse::<f64>().is_ok_and(|x| x >= 0.0), "{r:?}");
    }
    // The picture: oxccl's line and MPI's, a point per row each.
    let text = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    let series = series_of(&text);
    assert_eq!(series, [("oxccl".to_string(), 3), ("MPI, same run".to_string(), 3), ("oxccl".to_string(), 3), ("MPI, same run".to_string(), 3)], "{text}");
    assert!(text.contains("all_reduce, 2 ranks, CPU memory on ") && text.contains(": oxccl against MPI"), "{text}");
}

/// The series of an SVG from `--svg`, as (label, points) per panel, read back as XML.
fn series_of(svg: &str) -> Vec<(String, usize)> {
    let document = roxmltree::Document::parse(svg).unwrap();
    let series = document.descendants().filter(|n| n.attribute("class") == Some("series"));
    series.map(|s| (s.attribute("data-series").unwrap().to_string(), s.children().find(|n| n.has_tag_name("polyline")).unwrap().attribute("points").unwrap().split(' ').count())).collect()
}

#[test]
fn svg_draws_the_rows_it_prints() {
    let svg = std::env::temp_dir().join(format!("oxccl-perf-{}.svg", std::process::id()));
    let out = perf(&["all_reduce", "-b", "1K", "-e", "64K", "-f", "8", "--nranks", "2", "-n", "3", "-w", "1", "--svg", svg.to_str().unwrap()]);
    let stdout = assert_ok(&out, "--svg");
    let text = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    assert_eq!(series_of(&text), [("oxccl".to_string(), 3), ("oxccl".to_string(), 3)]);
    assert!(text.contains("all_reduce, 2 ranks, CPU memory on ") && text.contains("float sum · out-of-place · oxccl-perf -n 3 -w 1"), "{text}");
    // Each row's hover text holds the time the table prints (to its two decimals).
    let table = oxccl_bench::plot::Table::parse(&stdout, "stdout").unwrap();
    assert_eq!(table.rows.iter().map(|r| r.bytes).collect::<Vec<_>>(), [1024, 8192, 65536]);
    for row in &table.rows {
        let hover = format!("oxccl: {} KiB ({} B): ", row.bytes / 1024, row.bytes);
        let at = text.find(&hover).unwrap_or_else(|| panic!("{hover:?} not in {text}")) + hover.len();
        let time: f64 = text[at..].split(' ').next().unwrap().parse().unwrap();
        assert!((time - row.out_of_place.time_us).abs() <= 0.006, "{time} against the table's {}", row.out_of_place.time_us);
    }
}
