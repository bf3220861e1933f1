//! `--svg FILE`: the table as a picture — busbw and time per call against size, oxccl's
//! out-of-place rows beside its baseline's (`--baseline`), from the values the rows print.

use std::path::{Path, PathBuf};

use oxccl_bench::plot::{Chart, Point, Series};

use super::Plan;

/// The rows measured so far, oxccl's and the baseline's, for the picture.
pub struct Picture {
    path: PathBuf,
    oxccl: Vec<Point>,
    baseline: Vec<Point>,
}

/// Refuses a `--svg` file whose folder does not exist, before the run rather than after.
pub fn check(path: &Path) -> Result<(), String> {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match folder.is_dir() {
        true => Ok(()),
        false => Err(format!("--svg {}: the folder {} does not exist", path.display(), folder.display())),
    }
}

impl Picture {
    /// A picture to write at the end if `--svg` asks for one.
    pub fn new(plan: &Plan) -> Option<Picture> {
        plan.args.svg.clone().map(|path| Picture { path, oxccl: Vec::new(), baseline: Vec::new() })
    }

    /// One row of `bytes`: oxccl's seconds per call (out of place) and the baseline's, with
    /// the collective's bus-bandwidth `factor`.
    pub fn add(&mut self, bytes: usize, oxccl: f64, baseline: Option<f64>, factor: f64) {
        let point = |seconds: f64| Point { bytes: bytes as u64, time_us: seconds * 1e6, busbw: bytes as f64 / seconds / 1e9 * factor };
        self.oxccl.push(point(oxccl));
        self.baseline.extend(baseline.map(point));
    }

    /// Draws and writes the picture: `ranks` ranks on `machine` ("2 GPUs on vm"), against
    /// the baseline named `baseline` ("NCCL 2.28.3", "MPI") if one ran.
    pub fn write(self, plan: &Plan, ranks: usize, machine: &str, baseline: Option<&str>) -> Result<(), String> {
        let against = baseline.map_or(String::new(), |b| format!(": oxccl against {b}"));
        let op = if plan.kind.reduces() { format!("{} {}", plan.dtype.name(), plan.op.name()) } else { plan.dtype.name().to_string() };
        let mut series = vec![Series { label: "oxccl".into(), points: self.oxccl }];
        if let Some(name) = baseline {
            series.push(Series { label: format!("{name}, same run"), points: self.baseline });
        }
        let chart = Chart {
            title: format!("{}, {ranks} ranks, {machine}{against}", plan.kind_name()),
            facts: vec![op, "out-of-place".into(), format!("oxccl-perf -n {} -w {}", plan.args.iters, plan.args.warmup)],
            series,
            notes: vec![format!("Drawn by oxccl-perf from the rows of its table: the out-of-place columns{}.", if baseline.is_some() { " and the baseline's (out of place too)" } else { "" })],
        };
        let svg = chart.to_svg().map_err(|e| format!("--svg {}: {e}", self.path.display()))?;
        std::fs::write(&self.path, svg).map_err(|e| format!("--svg {}: {e}", self.path.display()))
    }
}
