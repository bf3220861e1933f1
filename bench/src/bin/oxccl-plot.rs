//! oxccl-plot: nccl-tests' tables (or oxccl-perf's) as one SVG picture — bus bandwidth and
//! time per call against message size, one line per table.
//!
//! ```text
//! oxccl-plot --out all_reduce.svg oxccl=ar-oxccl.txt nccl=ar-nccl.txt "NCCL best=ar-nccl-best.txt"
//! oxccl-plot --title "all_reduce, 2 ranks as hosts" --out ar.svg --in-place oxccl=ar-oxccl.txt
//! oxccl-plot --out perf.svg perf-all_reduce.txt      # oxccl-perf's table: oxccl and its baseline
//! oxccl-plot --compare-to nccl oxccl=ar-oxccl.txt nccl=ar-nccl.txt   # text: times and ratios
//! ```
//!
//! A size measured several times (nccl-tests `-N` cycles) is drawn, and compared, at its
//! median. `--compare-to LABEL` prints, instead of a picture, each size's time per table
//! and every other table's time over LABEL's (`plot::ratios`).
//!
//! Each table is `LABEL=FILE` (the legend says LABEL; the file follows the last `=`) or a bare `FILE` (the legend says the
//! file's name without its extension); `-` reads standard input. A table of oxccl-perf
//! with a baseline gives two lines: its own and the baseline's, measured in the same run.
//! The picture's notes name the file and lines each line was drawn from.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use oxccl_bench::plot::{self, Input, Options, Placement, Table};
use oxccl_bench::Error;

#[derive(Parser, Debug)]
#[command(name = "oxccl-plot", about = "Draws nccl-tests-style tables as one SVG: busbw and time per call against size, one line per table")]
struct Args {
    /// Where to write the SVG (`-`: standard output).
    #[arg(short, long, required_unless_present = "compare_to")]
    out: Option<PathBuf>,
    /// Print the times per size and each table's time over this label's table, as text on
    /// standard output, instead of drawing.
    #[arg(long, value_name = "LABEL", conflicts_with_all = ["out", "title", "in_place"])]
    compare_to: Option<String>,
    /// The picture's title (default: the collective, ranks and machine the tables name).
    #[arg(short, long)]
    title: Option<String>,
    /// Draw the in-place columns instead of the out-of-place ones.
    #[arg(long)]
    in_place: bool,
    /// Draw rows whose check found wrong elements (refused by default).
    #[arg(long)]
    allow_wrong: bool,
    /// The tables, `LABEL=FILE` or `FILE`, one line each, in the legend's order.
    #[arg(required = true, value_name = "LABEL=FILE")]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxccl-plot: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Error> {
    let inputs = args.tables.iter().map(|table| read(table)).collect::<Result<Vec<_>, _>>()?;
    if let Some(base) = &args.compare_to {
        print!("{}", plot::ratios(&inputs, base, args.allow_wrong)?);
        return Ok(());
    }
    let options = Options { title: args.title, placement: if args.in_place { Placement::InPlace } else { Placement::OutOfPlace }, allow_wrong: args.allow_wrong };
    let svg = plot::compare(&inputs, &options)?.to_svg()?;
    let out = args.out.expect("clap requires --out without --compare-to");
    if out == Path::new("-") {
        print!("{svg}");
        return Ok(());
    }
    std::fs::write(&out, svg).map_err(|source| Error::Io { path: out.display().to_string(), source })
}

/// One `LABEL=FILE` or `FILE` argument, read and parsed. The file is what follows the last
/// `=`, so that a label may hold one (`oxccl, NCCL_ALGO=Ring=table.txt`).
fn read(argument: &str) -> Result<Input, Error> {
    let (label, path) = match argument.rsplit_once('=') {
        Some((label, path)) if !label.is_empty() => (label.to_string(), path),
        _ => (Path::new(argument).file_stem().map_or(argument.to_string(), |s| s.to_string_lossy().into_owned()), argument),
    };
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|source| Error::Io { path: "standard input".into(), source })?
    } else {
        std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_string(), source })?
    };
    let origin = if path == "-" { "standard input" } else { path };
    Ok(Input { label, table: Table::parse(&text, origin)? })
}
