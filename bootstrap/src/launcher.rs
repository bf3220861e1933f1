//! Recognising the launcher that started this process, from its environment variables.
//!
//! | launcher | rank, size, local rank | root address |
//! |---|---|---|
//! | oxccl's own spawner | `OXCCL_RANK`, `OXCCL_NRANKS`, `OXCCL_LOCAL_RANK` | in `OXCCL_UNIQUE_ID` |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK` | none: the id travels by MPI or `OXCCL_UNIQUE_ID[_FILE]` |
//! | MPICH / Hydra (PMI) | `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID` | none, as for Open MPI |
//! | torchrun | `RANK`, `WORLD_SIZE`, `LOCAL_RANK` | `MASTER_ADDR`:`MASTER_PORT` (+1 under the elastic agent, whose own store holds `MASTER_PORT`) |
//! | Slurm `srun` | `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID` | first host of `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`), port `OXCCL_BOOTSTRAP_PORT` or derived from the job and step ids |
//!
//! The order of the table is the order of detection: `mpirun` inside a Slurm allocation is
//! Open MPI (the allocation's `SLURM_*` variables are inherited but do not describe the
//! ranks), and Slurm counts only inside a job step (`SLURM_STEP_ID` set).

use crate::config::Env;
use crate::error::{Error, Result};

/// Which launcher started this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LauncherKind {
    Oxccl,
    OpenMpi,
    Pmi,
    Torchrun,
    Slurm,
}

/// Where a launcher says the root is, when it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootHint {
    pub host: String,
    pub port: u16,
    /// Strings every rank of the job shares, mixed into the derived secret.
    pub job: Vec<String>,
}

/// This process's place in the job, as the launcher describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub kind: LauncherKind,
    pub rank: u32,
    pub nranks: u32,
    pub local_rank: Option<u32>,
    pub root: Option<RootHint>,
}

/// Detects the launcher, if any. A launcher whose variables are present but malformed is an
/// error naming the variable.
pub fn detect(env: &Env) -> Result<Option<Launch>> {
    let get = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let number = |name: &str| -> Result<Option<u32>> {
        get(name)
            .map(|v| {
                v.trim().parse::<u32>().map_err(|_| Error::Config { name: name.into(), value: v.into(), reason: "expected a non-negative integer".into() })
            })
            .transpose()
    };
    let positioned = |kind, rank: &str, size: &str, local: &str, root| -> Result<Option<Launch>> {
        let (Some(rank), Some(nranks)) = (number(rank)?, number(size)?) else {
            return Err(Error::NoLauncher(format!("{kind:?} launch: {rank} and {size} must both be set")));
        };
        if rank >= nranks {
            return Err(Error::NoLauncher(format!("{kind:?} launch: rank {rank} is not below the size {nranks}")));
        }
        Ok(Some(Launch { kind, rank, nranks, local_rank: number(local)?, root }))
    };

    if get("OXCCL_RANK").is_some() {
        return positioned(LauncherKind::Oxccl, "OXCCL_RANK", "OXCCL_NRANKS", "OXCCL_LOCAL_RANK", None);
    }
    if get("OMPI_COMM_WORLD_RANK").is_some() {
        return positioned(LauncherKind::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", None);
    }
    if get("PMI_RANK").is_some() {
        return positioned(LauncherKind::Pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", None);
    }
    if get("RANK").is_some() && get("WORLD_SIZE").is_some() && get("MASTER_ADDR").is_some() {
        let port = number("MASTER_PORT")?.ok_or_else(|| Error::NoLauncher("torchrun-style launch: MASTER_PORT must be set".into()))?;
        let elastic = get("TORCHELASTIC_RUN_ID");
        // The elastic agent's TCPStore listens on MASTER_PORT itself.
        let port = if elastic.is_some() { port + 1 } else { port };
        let port = u16::try_from(port).ok().filter(|&p| p != 0).ok_or_else(|| Error::Config {
            name: "MASTER_PORT".into(),
            value: get("MASTER_PORT").unwrap_or_default().into(),
            reason: "not a usable port".into(),
        })?;
        let host = get("MASTER_ADDR").expect("checked above").to_string();
        let job = vec!["torchrun".into(), elastic.unwrap_or("").into()];
        return positioned(LauncherKind::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", Some(RootHint { host, port, job }));
    }
    if get("SLURM_PROCID").is_some() && (get("SLURM_STEP_ID").is_some() || get("SLURM_STEPID").is_some()) {
        let nodes = get("SLURM_STEP_NODELIST").or(get("SLURM_JOB_NODELIST")).ok_or_else(|| {
            Error::NoLauncher("Slurm launch: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set".into())
        })?;
        let host = first_host(nodes)?;
        let job_id = get("SLURM_JOB_ID").or(get("SLURM_JOBID")).unwrap_or("0").to_string();
        let step_id = get("SLURM_STEP_ID").or(get("SLURM_STEPID")).unwrap_or("0").to_string();
        let port = match get("OXCCL_BOOTSTRAP_PORT") {
            Some(p) => p.parse().map_err(|_| Error::Config { name: "OXCCL_BOOTSTRAP_PORT".into(), value: p.into(), reason: "expected a port".into() })?,
            None => derived_port(&job_id, &step_id),
        };
        let job = vec!["slurm".into(), job_id, step_id];
        return positioned(LauncherKind::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", Some(RootHint { host, port, job }));
    }
    Ok(None)
}

/// A port for a Slurm step: 10000..30000 (below Linux's ephemeral range), a function of the
/// job and step ids so that steps sharing a node rarely collide.
pub fn derived_port(job_id: &str, step_id: &str) -> u16 {
    let h = format!("{job_id}.{step_id}").bytes().fold(2166136261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16777619));
    10000 + (h % 20000) as u16
}

/// The first host of a Slurm host list: `node[03-05,9],gpu1` → `node03`.
pub fn first_host(list: &str) -> Result<String> {
    let bad = |why: &str| Error::Config { name: "SLURM_STEP_NODELIST".into(), value: list.into(), reason: why.into() };
    let list = list.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    let prefix = &list[..end];
    if list[end..].starts_with('[') {
        let inner = &list[end + 1..list[end..].find(']').map(|i| end + i).ok_or_else(|| bad("unclosed ["))?];
        let first = inner.split([',', '-']).next().filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        let first = first.ok_or_else(|| bad("expected digits inside [...]"))?;
        Ok(format!("{prefix}{first}"))
    } else if prefix.is_empty() {
        Err(bad("empty host list"))
    } else {
        Ok(prefix.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn nothing_means_no_launcher() {
        assert_eq!(detect(&env(&[("HOME", "/root")])).unwrap(), None);
    }

    #[test]
    fn open_mpi() {
        let l = detect(&env(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_RANK", "0")])).unwrap().unwrap();
        assert_eq!((l.kind, l.rank, l.nranks, l.local_rank, l.root), (LauncherKind::OpenMpi, 2, 4, Some(0), None));
    }

    #[test]
    fn mpirun_inside_a_slurm_allocation_is_open_mpi() {
        let l = detect(&env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_NODELIST", "n1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.kind, LauncherKind::OpenMpi);
    }

    #[test]
    fn pmi() {
        let l = detect(&env(&[("PMI_RANK", "1"), ("PMI_SIZE", "3"), ("MPI_LOCALRANKID", "1")])).unwrap().unwrap();
        assert_eq!((l.kind, l.rank, l.nranks, l.local_rank), (LauncherKind::Pmi, 1, 3, Some(1)));
    }

    #[test]
    fn torchrun_plain_and_elastic() {
        let base = [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "3"), ("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")];
        let l = detect(&env(&base)).unwrap().unwrap();
        assert_eq!((l.kind, l.rank, l.nranks), (LauncherKind::Torchrun, 3, 8));
        assert_eq!(l.root.as_ref().unwrap().port, 29500);
        let mut elastic = base.to_vec();
        elastic.push(("TORCHELASTIC_RUN_ID", "abc"));
        assert_eq!(detect(&env(&elastic)).unwrap().unwrap().root.unwrap().port, 29501);
        let err = detect(&env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")])).unwrap_err();
        assert!(err.to_string().contains("MASTER_PORT"), "{err}");
    }

    #[test]
    fn slurm_step() {
        let vars = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_NODELIST", "gpu[07-08]"),
        ];
        let l = detect(&env(&vars)).unwrap().unwrap();
        let root = l.root.unwrap();
        assert_eq!((l.kind, l.rank, l.nranks, l.local_rank), (LauncherKind::Slurm, 5, 8, Some(1)));
        assert_eq!(root.host, "gpu07");
        assert_eq!(root.port, derived_port("1234", "0"));
        assert!((10000..30000).contains(&root.port));
        let mut fixed = vars.to_vec();
        fixed.push(("OXCCL_BOOTSTRAP_PORT", "4242"));
        assert_eq!(detect(&env(&fixed)).unwrap().unwrap().root.unwrap().port, 4242);
    }

    #[test]
    fn slurm_batch_script_without_a_step_is_no_launch() {
        assert_eq!(detect(&env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4"), ("SLURM_JOB_NODELIST", "n1")])).unwrap(), None);
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let err = detect(&env(&[("OMPI_COMM_WORLD_RANK", "x"), ("OMPI_COMM_WORLD_SIZE", "4")])).unwrap_err();
        assert!(err.to_string().contains("OMPI_COMM_WORLD_RANK"), "{err}");
        let err = detect(&env(&[("OXCCL_RANK", "4"), ("OXCCL_NRANKS", "4")])).unwrap_err();
        assert!(err.to_string().contains("not below"), "{err}");
    }

    #[test]
    fn host_lists() {
        assert_eq!(first_host("node[03-05,9],gpu1").unwrap(), "node03");
        assert_eq!(first_host("a,b").unwrap(), "a");
        assert_eq!(first_host("vm").unwrap(), "vm");
        assert_eq!(first_host("n[7]").unwrap(), "n7");
        assert!(first_host("n[").is_err());
        assert!(first_host("").is_err());
    }
}
