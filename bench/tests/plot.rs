//! oxccl-plot as users run it, on the tables kept under docs/results: every kept table
//! reads, pictures of real runs are well-formed SVG with a line per table, and bad input
//! is named by file and line.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use oxccl_bench::plot::Table;
use oxccl_testkit::run;

/// docs/results of this repository.
fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results")
}

/// The 2026-11-25 H100 run's tables (nccl-tests, ranks posing as hosts).
fn net(name: &str) -> String {
    results().join("2026-11-25-h100x1-net/net").join(name).display().to_string()
}

fn plot(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl-plot"));
    cmd.args(args);
    run(cmd, Duration::from_secs(60))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The text files under `folder`, recursively.
fn files(folder: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, found);
        } else if path.extension().is_some_and(|e| e == "txt" || e == "log") {
            found.push(path);
        }
    }
}

#[test]
fn every_kept_table_reads() {
    let mut found = Vec::new();
    files(&results(), &mut found);
    let (mut tables, mut rows, mut refused) = (0, 0, Vec::new());
    for path in found {
        let text = std::fs::read_to_string(&path).unwrap();
        // A table's column header: `#`, then size count type.
        let has_header = text.lines().any(|l| l.strip_prefix('#').is_some_and(|c| c.split_whitespace().take(3).eq(["size", "count", "type"])));
        if !has_header {
            continue;
        }
        match Table::parse(&text, &path.display().to_string()) {
            Ok(table) => {
                tables += 1;
                rows += table.rows.len();
                assert!(table.collective.is_some(), "{}: no collective named", path.display());
            }
            // A run that died before its first size leaves a header and no row; NCCL_DEBUG=INFO
            // writes its lines into the middle of rows.
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("has no rows") || e.contains("NCCL's log is interleaved with the row"), "{e}");
                refused.push(e);
            }
        }
    }
    assert!(tables >= 200 && rows >= 2000 && refused.len() <= 10, "{tables} tables, {rows} rows; refused: {refused:#?}");
}

#[test]
fn draws_nccl_tests_tables_one_line_each() {
    let out_dir = tempdir("draw");
    let svg_path = out_dir.join("ar.svg");
    let oxccl = format!("oxccl={}", net("net-2r-all_reduce-oxccl.txt"));
    // A label may hold `=`: the file is what follows the last one.
    let nccl = format!("NCCL 2.28.3, NCCL_ALGO=Ring={}", net("net-2r-all_reduce-nccl.txt"));
    let best = net("net-2r-all_reduce-nccl-best.txt");
    let out = plot(&["--title", "all_reduce, 2 ranks as hosts", "--out", svg_path.to_str().unwrap(), &oxccl, &nccl, &best]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let document = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = document.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
    for expected in ["all_reduce, 2 ranks as hosts", "oxccl", "NCCL 2.28.3, NCCL_ALGO=Ring", "net-2r-all_reduce-nccl-best", "busbw (GB/s)"] {
        assert!(texts.contains(&expected), "{expected:?} not in {texts:?}");
    }
    assert!(texts.iter().any(|t| t.contains("all_reduce · 2 ranks · 1 GPU (NVIDIA H100 80GB HBM3) on vm")), "{texts:?}");
    assert!(texts.iter().any(|t| t.ends_with("net-2r-all_reduce-oxccl.txt out-of-place, lines 12-24")), "{texts:?}");
    for panel in ["busbw", "time"] {
        let group = document.descendants().find(|n| n.attribute("id") == Some(panel)).unwrap();
        let lines: Vec<usize> = group
            .children()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|s| s.children().find(|n| n.has_tag_name("polyline")).unwrap().attribute("points").unwrap().split(' ').count())
            .collect();
        assert_eq!(lines, [13, 13, 13], "{panel}: one line of 13 sizes per table");
    }
    // The largest size's hover text carries the table's values.
    assert!(svg.contains("oxccl: 128 MiB (134217728 B): 20821.8 µs, busbw 6.45 GB/s"));

    // --in-place draws the other columns; `-` writes to standard output.
    let out = plot(&["--out", "-", "--in-place", &oxccl]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = String::from_utf8(out.stdout).unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(svg.contains("oxccl: 128 MiB (134217728 B): 20958.1 µs, busbw 6.4 GB/s") && svg.contains("in-place columns"));
}

#[test]
fn an_oxccl_perf_table_gives_oxccl_and_its_baseline() {
    let table = results().join("2026-11-23-h200x2-fifth/3-channels/perf-sendrecv-2gpu-staged.txt");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl-plot"));
    cmd.args(["--out", "-", "staged=-"]).stdin(File::open(&table).unwrap());
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = String::from_utf8(out.stdout).unwrap();
    let document = roxmltree::Document::parse(&svg).unwrap();
    let series: Vec<&str> = document.descendants().filter(|n| n.attribute("class") == Some("series")).filter_map(|n| n.attribute("data-series")).collect();
    assert_eq!(series, ["staged", "NCCL 2.28.3, same run as staged", "staged", "NCCL 2.28.3, same run as staged"]);
    assert!(svg.contains("sendrecv, 2 ranks, 2 GPUs, each rank posing as a host"), "{svg}");
    assert!(svg.contains("NCCL 2.28.3, same run as staged: 64 MiB (67108864 B): 30402.1 µs, busbw 2.21 GB/s"));
}

#[test]
fn bad_input_is_named() {
    let dir = tempdir("bad");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let header = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n";
    let short = write("short.txt", &format!("# nccl-tests version 2.19.6\n{header}  8  2  float  sum  -1  20.1  0.00  0.00  0\n"));
    let empty = write("empty.txt", header);
    let prose = write("prose.txt", "nothing measured here\n");
    let wrong = write("wrong.txt", &format!("{header}  8  2  float  sum  -1  20.1  0.00  0.00  5  20.1  0.00  0.00  0\n"));
    let missing = dir.join("missing.txt").display().to_string();
    let svg = dir.join("x.svg").display().to_string();
    for (args, expected) in [
        (vec!["--out", &svg, &short], format!("oxccl-plot: {short}:3: a row of 9 columns where the header announces 13")),
        (vec!["--out", &svg, &empty], format!("oxccl-plot: {empty}: the table whose header is at line 1 has no rows")),
        (vec!["--out", &svg, &prose], format!("oxccl-plot: {prose}: no nccl-tests table here")),
        (vec!["--out", &svg, &wrong], format!("oxccl-plot: {wrong}:2: 5 wrong elements out-of-place at 8 bytes")),
        (vec!["--out", &svg, &missing], format!("oxccl-plot: {missing}: No such file")),
        (vec!["--out", "/nonexistent-folder/x.svg", &net("net-2r-sendrecv-oxccl.txt")], "oxccl-plot: /nonexistent-folder/x.svg: No such file".to_string()),
        (vec!["--out", &svg], "the following required arguments were not provided".to_string()),
    ] {
        let out = plot(&args);
        assert!(!out.status.success() && stderr(&out).contains(&expected), "{args:?}: {}", stderr(&out));
    }
    assert!(!Path::new(&svg).exists(), "no picture is written from bad input");
    // The wrong rows are drawn when asked.
    let out = plot(&["--allow-wrong", "--out", &svg, &wrong]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A fresh folder for one test's files.
fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxccl-plot-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An nccl-tests table of `cycles` passes (`-N`), each row `(bytes, out-of-place µs,
/// in-place µs)`, with 0 wrong elements.
fn cycles_table(cycles: &[&[(u64, f64, f64)]]) -> String {
    let mut text = String::from("# nccl-tests version 2.19.6\n#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n");
    for cycle in cycles {
        for (bytes, out, inp) in *cycle {
            text += &format!("  {bytes}  {}  float  none  -1  {out}  0.00  0.00  0  {inp}  0.00  0.00  0\n", bytes / 4);
        }
    }
    text + "# Avg bus bandwidth    : 0.0\n"
}

/// `--compare-to`, as gpu-net-bench.sh runs it after each test: per size the median time
/// over nccl-tests' `-N` cycles, and each table's time over the named one's.
#[test]
fn tables_are_compared_at_their_median_over_cycles() {
    let dir = tempdir("compare");
    // NCCL: 20 µs at 32 B and 40 at 1 MiB; oxccl half of that, but its second cycle stalls.
    let nccl: &[(u64, f64, f64)] = &[(32, 20.0, 20.0), (1 << 20, 40.0, 40.0)];
    let stalled: &[(u64, f64, f64)] = &[(32, 90.0, 95.0), (1 << 20, 400.0, 20.0)];
    let fast: &[(u64, f64, f64)] = &[(32, 10.0, 10.0), (1 << 20, 20.0, 20.0)];
    let (nccl_file, oxccl_file) = (dir.join("nccl.txt"), dir.join("oxccl.txt"));
    std::fs::write(&nccl_file, cycles_table(&[nccl, nccl, nccl])).unwrap();
    std::fs::write(&oxccl_file, cycles_table(&[fast, stalled, fast])).unwrap();
    let (nccl_arg, oxccl_arg) = (format!("nccl={}", nccl_file.display()), format!("oxccl={}", oxccl_file.display()));
    let out = plot(&["--compare-to", "nccl", &oxccl_arg, &nccl_arg]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("the median of 3 cycle(s) per size"), "{text}");
    assert!(text.contains("        32     10.00/10.00         20.00/20.00"), "{text}");
    // Columns by number, each named above the table.
    assert!(text.contains("# [1] oxccl\n# [2] nccl\n     bytes                 [1]                 [2]\n"), "{text}");
    assert!(text.contains("oxccl: 8-128 B: x0.500 (2), 512 B-32 KiB: no sizes, from 1 MiB: x0.500 (2)"), "{text}");
    // A label no table has is named, with the labels there are.
    let out = plot(&["--compare-to", "mpi", &oxccl_arg, &nccl_arg]);
    assert!(!out.status.success() && stderr(&out).contains("no table labelled 'mpi' to compare with (the labels: oxccl, nccl)"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
