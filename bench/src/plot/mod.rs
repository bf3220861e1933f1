//! Pictures of benchmark tables: busbw and time per call against message size, one line
//! per series (oxccl beside its baseline, NCCL at its defaults and at its best settings,
//! ...), drawn as one self-contained SVG with two panels.
//!
//! [`Table::parse`] reads a table (nccl-tests' or oxccl-perf's); [`compare`] turns tables
//! into a [`Chart`], one series per table (and one more for a table's same-run
//! baseline); [`Chart::to_svg`] draws it. oxccl-perf builds its [`Chart`] from its own
//! measurements directly. Only what the tables hold is drawn: no fitted curves, no
//! interpolation between sizes beyond the straight lines joining the measured points.

mod axis;
mod svg;
mod table;

pub use table::{Measurement, Row, Table};

use crate::{Error, Result};

/// One measured size of a series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Message size, bytes.
    pub bytes: u64,
    /// Time per call, microseconds.
    pub time_us: f64,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
}

/// One line of the picture: a label and its points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's text ("oxccl", "NCCL 2.28.3 at its defaults").
    pub label: String,
    /// The points, in any order (drawn by size).
    pub points: Vec<Point>,
}

/// A picture: a title, a line of facts under it, the series, and notes at the bottom (where
/// each series was read from, what was left out).
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The title: what was measured, on what.
    pub title: String,
    /// Facts shown under the title, joined by " · " (datatype, placement, program).
    pub facts: Vec<String>,
    /// The series, drawn in this order, in the legend's order.
    pub series: Vec<Series>,
    /// Lines at the bottom of the picture.
    pub notes: Vec<String>,
}

impl Chart {
    /// The picture as an SVG document: two panels (busbw GB/s and time per call against
    /// size, size and time on log scales), a legend, the title, facts and notes.
    ///
    /// Errors: no series, or a series with no point that a log size axis can show (all
    /// its rows are 0 bytes).
    pub fn to_svg(&self) -> Result<String> {
        svg::render(self)
    }
}

/// Which of a table's two placements to draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// nccl-tests' out-of-place columns (what oxccl-perf's ratio compares).
    #[default]
    OutOfPlace,
    /// The in-place columns.
    InPlace,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out-of-place",
            Placement::InPlace => "in-place",
        }
    }

    fn of(self, row: &Row) -> Option<Measurement> {
        match self {
            Placement::OutOfPlace => Some(row.out_of_place),
            Placement::InPlace => row.in_place,
        }
    }
}

/// One table to compare and its legend label.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The legend's text for the table's series.
    pub label: String,
    /// The table.
    pub table: Table,
}

/// How [`compare`] draws.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// The title; by default one naming the collective, ranks and machine the tables say.
    pub title: Option<String>,
    /// The columns to draw.
    pub placement: Placement,
    /// Draw rows whose check found wrong elements (refused by default: a fast wrong result
    /// is no result).
    pub allow_wrong: bool,
}

/// A chart comparing `inputs`: a series per table, labelled by its input, and one more per
/// table that holds a same-run baseline ("NCCL 2.28.3, same run as <label>", baseline
/// columns have no placement: they are out-of-place).
///
/// Errors: no input; a table without the chosen placement's columns; a row with wrong
/// elements (unless `options.allow_wrong`), naming its file and line.
pub fn compare(inputs: &[Input], options: &Options) -> Result<Chart> {
    if inputs.is_empty() {
        return Err(Error::Chart { what: "no tables to compare".into() });
    }
    let mut series = Vec::new();
    let mut notes = Vec::new();
    for Input { label, table } in inputs {
        let (points, lines) = measured(table, options.placement, options.allow_wrong)?;
        if points.is_empty() {
            return Err(Error::File { origin: table.origin.clone(), what: format!("no {} columns to draw (every row says N/A)", options.placement.name()) });
        }
        let skipped = table.rows.len() - points.len();
        let skipped = if skipped > 0 { format!(", {skipped} rows N/A") } else { String::new() };
        let (points, cycles) = medians(points);
        let cycles = if cycles > 1 { format!(", the median of {cycles} cycles per size") } else { String::new() };
        notes.push(format!("{label}: {} {}, lines {}-{}{skipped}{cycles}", table.origin, options.placement.name(), lines[0], lines[lines.len() - 1]));
        series.push(Series { label: label.clone(), points });
        if let Some(name) = &table.baseline {
            let (points, _) = medians(table.rows.iter().filter_map(|r| r.baseline.map(|b| Point { bytes: r.bytes, time_us: b.time_us, busbw: b.busbw })).collect());
            notes.push(format!("{name}, same run as {label}: {} baseline columns", table.origin));
            series.push(Series { label: format!("{name}, same run as {label}"), points });
        }
    }
    let tables: Vec<&Table> = inputs.iter().map(|i| &i.table).collect();
    let collective = joined(tables.iter().map(|t| t.collective.clone().unwrap_or_else(|| "collective not named".into())));
    let ranks = joined(tables.iter().map(|t| t.ranks.map_or("ranks not named".into(), |n| format!("{n} ranks"))));
    let machine = joined(tables.iter().filter_map(|t| t.machine.clone()));
    let measured: Vec<String> = [collective, ranks, machine].into_iter().filter(|s| !s.is_empty()).collect();
    let mut facts = Vec::new();
    let title = match &options.title {
        Some(title) => {
            facts.extend(measured);
            title.clone()
        }
        None => measured.join(", "),
    };
    let rows = tables.iter().flat_map(|t| &t.rows);
    facts.push(joined(rows.clone().map(|r| if r.op == "none" { r.dtype.clone() } else { format!("{} {}", r.dtype, r.op) })));
    facts.push(format!("{} columns", options.placement.name()));
    facts.extend(distinct(tables.iter().filter_map(|t| t.tool.clone())));
    if tables.iter().any(|t| t.cpu_time) {
        let which = if tables.iter().all(|t| t.cpu_time) { "times" } else { "times of tables with cputime columns" };
        facts.push(format!("{which}: the host's CPU time to issue a call (nccl-tests -C 1), not the GPU's"));
    }
    notes.insert(0, "Drawn from:".into());
    Ok(Chart { title, facts, series, notes })
}

/// The distinct values, in first-seen order, joined by " / ".
fn joined(values: impl Iterator<Item = String>) -> String {
    distinct(values).join(" / ")
}

/// `table`'s rows in `placement`'s columns as points, with their lines (rows saying N/A
/// left out). An error for a row with wrong elements unless `allow_wrong`.
fn measured(table: &Table, placement: Placement, allow_wrong: bool) -> Result<(Vec<Point>, Vec<usize>)> {
    let (mut points, mut lines) = (Vec::new(), Vec::new());
    for row in &table.rows {
        let Some(measured) = placement.of(row) else { continue };
        if let (Some(wrong @ 1..), false) = (measured.wrong, allow_wrong) {
            return Err(Error::Line {
                origin: table.origin.clone(),
                line: row.line,
                what: format!("{wrong} wrong elements {} at {} bytes: a picture of wrong results would mislead (oxccl-plot --allow-wrong draws it anyway)", placement.name(), row.bytes),
            });
        }
        points.push(Point { bytes: row.bytes, time_us: measured.time_us, busbw: measured.busbw });
        lines.push(row.line);
    }
    Ok((points, lines))
}

/// The size ranges [`ratios`] sums up, by name: the smallest calls (NCCL's LL and its
/// sockets' one-write messages), the rest of the latency range, and bandwidth.
pub const RATIO_RANGES: [(&str, u64, u64); 3] = [("8-128 B", 1, 128), ("512 B-32 KiB", 512, 32 << 10), ("from 1 MiB", 1 << 20, u64::MAX)];

/// `inputs` against the one labelled `base`, as text: each size's median time over its
/// cycles (nccl-tests `-N`), out-of-place / in-place, one column per input; then, for each
/// other input, the geometric mean over both placements of its time over the base's in
/// each of [`RATIO_RANGES`] (below 1: faster than the base), with the number of cells.
///
/// Errors: no input labelled `base`; a table with no rows in either placement; a row with
/// wrong elements (unless `allow_wrong`).
pub fn ratios(inputs: &[Input], base: &str, allow_wrong: bool) -> Result<String> {
    use std::fmt::Write as _;
    let Some(base_at) = inputs.iter().position(|i| i.label == base) else {
        let labels: Vec<&str> = inputs.iter().map(|i| i.label.as_str()).collect();
        return Err(Error::Chart { what: format!("no table labelled '{base}' to compare with (the labels: {})", labels.join(", ")) });
    };
    // Per input: (size, out-of-place µs, in-place µs), and the most cycles of a size.
    let mut times: Vec<(Vec<(u64, f64, Option<f64>)>, usize)> = Vec::new();
    for Input { table, .. } in inputs {
        let (out, _) = measured(table, Placement::OutOfPlace, allow_wrong)?;
        let (inp, _) = measured(table, Placement::InPlace, allow_wrong)?;
        if out.is_empty() {
            return Err(Error::File { origin: table.origin.clone(), what: "no rows to compare".into() });
        }
        let ((out, cycles), (inp, _)) = (medians(out), medians(inp));
        times.push((out.iter().map(|p| (p.bytes, p.time_us, inp.iter().find(|q| q.bytes == p.bytes).map(|q| q.time_us))).collect(), cycles));
    }
    let cycles = times.iter().map(|(_, c)| *c).max().unwrap_or(1);
    let mut text = format!("# time per call (us), out-of-place / in-place, the median of {cycles} cycle(s) per size\n");
    // Columns by number (labels are longer than a column), named above them.
    for (at, input) in inputs.iter().enumerate() {
        let _ = writeln!(text, "# [{}] {}", at + 1, input.label);
    }
    let _ = writeln!(text, "{:>10} {}", "bytes", (1..=inputs.len()).map(|n| format!("{:>19}", format!("[{n}]"))).collect::<Vec<_>>().join(" "));
    for &(bytes, ..) in &times[base_at].0 {
        let cells: Vec<String> = times
            .iter()
            .map(|(sizes, _)| match sizes.iter().find(|s| s.0 == bytes) {
                Some(&(_, out, inp)) => format!("{out:9.2}/{}", inp.map_or(format!("{:>9}", "N/A"), |t| format!("{t:<9.2}"))),
                None => " ".repeat(19),
            })
            .collect();
        let _ = writeln!(text, "{bytes:>10} {}", cells.join(" "));
    }
    let _ = writeln!(text, "# time over {base}'s, geometric mean over both placements (cells)");
    for (at, input) in inputs.iter().enumerate().filter(|&(at, _)| at != base_at) {
        let parts: Vec<String> = RATIO_RANGES
            .iter()
            .map(|&(name, low, high)| {
                let logs: Vec<f64> = times[at]
                    .0
                    .iter()
                    .filter(|s| (low..=high).contains(&s.0))
                    .filter_map(|&(bytes, out, inp)| times[base_at].0.iter().find(|b| b.0 == bytes).map(|&(_, b_out, b_in)| [(Some(out), Some(b_out)), (inp, b_in)]))
                    .flatten()
                    .filter_map(|(t, b)| Some((t?, b?)))
                    .filter(|&(t, b)| t > 0.0 && b > 0.0)
                    .map(|(t, b)| (t / b).ln())
                    .collect();
                match logs.len() {
                    0 => format!("{name}: no sizes"),
                    n => format!("{name}: x{:.3} ({n})", (logs.iter().sum::<f64>() / n as f64).exp()),
                }
            })
            .collect();
        let _ = writeln!(text, "{}: {}", input.label, parts.join(", "));
    }
    Ok(text)
}

/// One point per size, in the order sizes first appear: a size measured several times (the
/// rows of nccl-tests' `-N` cycles, each its own pass over the sizes) gets the median of its
/// times and of its bus bandwidths (of an even count, the mean of the middle two), so that
/// one cycle's stall does not move the line. Also the most times a size was measured.
fn medians(points: Vec<Point>) -> (Vec<Point>, usize) {
    let mut sizes: Vec<(u64, Vec<f64>, Vec<f64>)> = Vec::new();
    for p in points {
        match sizes.iter_mut().find(|(bytes, _, _)| *bytes == p.bytes) {
            Some((_, times, busbws)) => {
                times.push(p.time_us);
                busbws.push(p.busbw);
            }
            None => sizes.push((p.bytes, vec![p.time_us], vec![p.busbw])),
        }
    }
    let cycles = sizes.iter().map(|(_, times, _)| times.len()).max().unwrap_or(0);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        if v.len() % 2 == 0 {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        }
    };
    (sizes.into_iter().map(|(bytes, times, busbws)| Point { bytes, time_us: median(times), busbw: median(busbws) }).collect(), cycles)
}

/// The values in first-seen order, each once.
fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(origin: &str, rows: &[(u64, f64, f64, Option<u64>)], baseline: bool) -> Table {
        let mut text = String::from("# nccl-tests version 2.19.6\n# Collective test starting: all_gather_perf\n#  Rank  0 Group  0 Pid 1 on h device  0 [0000:00:06] NVIDIA H100 80GB HBM3\n#  Rank  1 Group  0 Pid 2 on h device  0 [0000:00:06] NVIDIA H100 80GB HBM3\n#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong");
        text += if baseline { "  nccl  nccl  ratio\n" } else { "\n" };
        for (i, (bytes, time, busbw, wrong)) in rows.iter().enumerate() {
            let wrong = wrong.map_or("N/A".into(), |w| w.to_string());
            text += &format!("{bytes} {} float none -1 {time} 0.1 {busbw} {wrong} N/A N/A N/A N/A", bytes / 4);
            text += &if baseline { format!(" {} {} 1.0\n", time * 2.0, busbw / 2.0 + i as f64) } else { "\n".into() };
        }
        Table::parse(&text, origin).unwrap()
    }

    #[test]
    fn a_series_per_table_and_per_baseline_with_facts_and_sources() {
        let inputs = [
            Input { label: "oxccl".into(), table: table("ox.txt", &[(8, 20.0, 0.0, Some(0)), (1024, 30.0, 0.5, Some(0))], true) },
            Input { label: "NCCL".into(), table: table("nccl.txt", &[(8, 25.0, 0.0, None), (1024, 28.0, 0.6, None)], false) },
        ];
        let chart = compare(&inputs, &Options::default()).unwrap();
        assert_eq!(chart.title, "all_gather, 2 ranks, 1 GPU (NVIDIA H100 80GB HBM3) on h");
        assert_eq!(chart.facts, ["float", "out-of-place columns", "nccl-tests 2.19.6"]);
        let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["oxccl", "NCCL, same run as oxccl", "NCCL"]);
        assert_eq!(chart.series[0].points[1], Point { bytes: 1024, time_us: 30.0, busbw: 0.5 });
        assert_eq!(chart.series[1].points, [Point { bytes: 8, time_us: 40.0, busbw: 0.0 }, Point { bytes: 1024, time_us: 60.0, busbw: 1.25 }]);
        assert_eq!(chart.notes, ["Drawn from:", "oxccl: ox.txt out-of-place, lines 6-7", "NCCL, same run as oxccl: ox.txt baseline columns", "NCCL: nccl.txt out-of-place, lines 6-7"]);

        let titled = compare(&inputs[1..], &Options { title: Some("mine".into()), ..Options::default() }).unwrap();
        assert_eq!(titled.title, "mine");
        assert_eq!(titled.facts[..3], ["all_gather", "2 ranks", "1 GPU (NVIDIA H100 80GB HBM3) on h"]);
    }

    /// nccl-tests `-N 3`: each size three times, one cycle after another; a cycle's stall
    /// (90 µs) does not move the median.
    #[test]
    fn sizes_measured_in_several_cycles_are_drawn_at_their_median() {
        let rows = [(8, 20.0, 0.0, Some(0)), (1024, 30.0, 0.5, Some(0)), (8, 90.0, 0.0, Some(0)), (1024, 31.0, 0.4, Some(0)), (8, 21.0, 0.0, Some(0)), (1024, 29.0, 0.6, Some(0))];
        let chart = compare(&[Input { label: "oxccl".into(), table: table("n3.txt", &rows, true) }], &Options::default()).unwrap();
        assert_eq!(chart.series[0].points, [Point { bytes: 8, time_us: 21.0, busbw: 0.0 }, Point { bytes: 1024, time_us: 30.0, busbw: 0.5 }]);
        // The baseline's columns too (times doubled, busbw halved plus the row's index).
        assert_eq!(chart.series[1].points, [Point { bytes: 8, time_us: 42.0, busbw: 2.0 }, Point { bytes: 1024, time_us: 60.0, busbw: 3.2 }]);
        assert_eq!(chart.notes[1], "oxccl: n3.txt out-of-place, lines 6-11, the median of 3 cycles per size");
        let (even, cycles) = medians(vec![Point { bytes: 8, time_us: 1.0, busbw: 4.0 }, Point { bytes: 8, time_us: 3.0, busbw: 2.0 }]);
        assert_eq!((even, cycles), (vec![Point { bytes: 8, time_us: 2.0, busbw: 3.0 }], 2));
    }

    #[test]
    fn wrong_rows_and_missing_placements_are_refused() {
        let wrong = [Input { label: "x".into(), table: table("w.txt", &[(8, 20.0, 0.0, Some(0)), (64, 20.0, 0.0, Some(3))], false) }];
        let error = compare(&wrong, &Options::default()).unwrap_err().to_string();
        assert!(error.starts_with("w.txt:7: 3 wrong elements out-of-place at 64 bytes"), "{error}");
        assert_eq!(compare(&wrong, &Options { allow_wrong: true, ..Options::default() }).unwrap().series[0].points.len(), 2);
        let error = compare(&wrong, &Options { placement: Placement::InPlace, ..Options::default() }).unwrap_err().to_string();
        assert_eq!(error, "w.txt: no in-place columns to draw (every row says N/A)");
        assert_eq!(compare(&[], &Options::default()).unwrap_err().to_string(), "no tables to compare");
    }
}
