//! Time from the first bootstrap call to bootstrap-ready, for 2..64 local ranks.
//!
//! Every rank is a process started beforehand and held at a start line; the clock starts
//! when they are released together, and a rank is ready when `Bootstrap::from_env` and a
//! barrier have returned. Printed per size: the last rank's ready time (the job's), and the
//! median rank's. `--threads` runs the ranks as threads of one process instead.
//!
//! ```text
//! oxccl-bootstrap-bench [--sizes 2,4,8,16,32,64] [--repeat 5] [--threads]
//! ```

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use oxccl_bootstrap::{config::process_env, AbortFlag, Bootstrap, Config};

#[derive(Parser)]
#[command(about = "Bootstrap latency for N local ranks")]
struct Args {
    /// Job sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    sizes: Vec<u32>,
    /// Runs per size; the table shows the median run.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Ranks as threads of this process rather than processes.
    #[arg(long)]
    threads: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    if process_env().contains_key("OXCCL_RANK") {
        return child(&config);
    }
    let args = Args::parse();
    println!("# oxccl bootstrap latency, {} ranks as {}", args.sizes.iter().map(u32::to_string).collect::<Vec<_>>().join("/"), if args.threads { "threads" } else { "processes" });
    println!("# host {} cores {}", oxccl_bootstrap::host_name(), std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
    println!("{:>8} {:>14} {:>14}", "nranks", "job ready ms", "median rank ms");
    for &n in &args.sizes {
        let mut runs: Vec<(f64, f64)> = (0..args.repeat)
            .map(|_| if args.threads { run_threads(n, &config) } else { run_processes(n, &config) })
            .collect::<Result<_, _>>()?;
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (job, median) = runs[runs.len() / 2];
        println!("{n:>8} {job:>14.2} {median:>14.2}");
    }
    Ok(())
}

/// One run with `n` processes; returns (last rank ready, median rank ready) in ms.
fn run_processes(n: u32, config: &Config) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let id = Bootstrap::create_local_id(config)?;
    let mut children = Vec::new();
    for rank in 0..n {
        let child = Command::new(&exe)
            .env("OXCCL_RANK", rank.to_string())
            .env("OXCCL_NRANKS", n.to_string())
            .env("OXCCL_UNIQUE_ID", id.to_hex())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        children.push(child);
    }
    // Wait until every child is at the start line.
    let mut readers: Vec<_> = children.iter_mut().map(|c| BufReader::new(c.stdout.take().expect("piped"))).collect();
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err(format!("child said {line:?}").into());
        }
    }
    let go = now_ns();
    for c in &mut children {
        c.stdin.take().expect("piped").write_all(b"go\n")?;
    }
    let mut times = Vec::new();
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let done: u128 = line.trim().parse().map_err(|_| format!("child said {line:?}"))?;
        times.push((done.saturating_sub(go)) as f64 / 1e6);
    }
    for mut c in children {
        if !c.wait()?.success() {
            return Err("a rank failed".into());
        }
    }
    Ok(summarize(times))
}

fn child(config: &Config) -> Result<(), Box<dyn std::error::Error>> {
    println!("ready");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let boot = Bootstrap::from_env(config)?;
    boot.barrier()?;
    println!("{}", now_ns());
    std::io::stdout().flush()?;
    // Stay until everyone is done, so that no rank's exit disturbs another's timing.
    boot.barrier()?;
    Ok(())
}

fn run_threads(n: u32, config: &Config) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let id = Bootstrap::create_local_id(config)?;
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let config = config.clone();
            std::thread::spawn(move || -> Result<(Duration, Bootstrap), oxccl_bootstrap::Error> {
                let boot = Bootstrap::init(&id, rank, n, &config, AbortFlag::new())?;
                boot.barrier()?;
                Ok((start.elapsed(), boot))
            })
        })
        .collect();
    let mut times = Vec::new();
    let mut boots = Vec::new();
    for h in handles {
        let (t, b) = h.join().map_err(|_| "rank thread panicked")??;
        times.push(t.as_secs_f64() * 1e3);
        boots.push(b);
    }
    Ok(summarize(times))
}

fn summarize(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (*times.last().unwrap_or(&0.0), times[times.len() / 2])
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}
