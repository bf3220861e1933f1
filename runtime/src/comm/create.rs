//! Making communicators: joining a job (init, from the environment, from MPI, several
//! ranks in one process), and the communicators made from one — split, shrink (with a
//! list or by agreement on the failed ranks), grow. Each builds a bootstrap, learns who
//! shares this rank's host, and puts a backend on the [`Core`].

use oxccl_bootstrap::{AbortFlag, Bootstrap, Config, UniqueId};

use crate::base::{host_id, machine_id, process_tag, Core, Placement};
use super::{Backend, Communicator, Memory};
use crate::error::{Error, Result};

impl Communicator {
    /// Joins the job named by `id` as `rank` of `nranks`, on host memory.
    pub fn init(id: &UniqueId, rank: u32, nranks: u32, config: &Config) -> Result<Communicator> {
        join(id, rank, nranks, config, AbortFlag::new(), None)
    }

    /// Joins the job the environment describes (launcher, NCCL_COMM_ID, MPI; see
    /// `Bootstrap::from_env`), on host memory.
    pub fn from_env(config: &Config) -> Result<Communicator> {
        Communicator::from_bootstrap(Bootstrap::from_env(config)?, config)
    }

    /// Rank 0 of the MPI communicator creates the id and broadcasts it over MPI.
    #[cfg(feature = "mpi")]
    pub fn from_mpi<C: mpi::topology::Communicator>(comm: &C, config: &Config) -> Result<Communicator> {
        Communicator::from_bootstrap(Bootstrap::from_mpi(comm, config)?, config)
    }

    /// `n` communicators of one job on host memory, one per rank, in this process (one
    /// thread each).
    pub fn init_all(n: u32, config: &Config) -> Result<Vec<Communicator>> {
        Communicator::init_all_with(&vec![config.clone(); n as usize])
    }

    /// As [`Communicator::init_all`], rank i with `configs[i]` (say, a host id of its own,
    /// to run the ranks as if on separate hosts); the job's id is made from `configs[0]`.
    pub fn init_all_with(configs: &[Config]) -> Result<Vec<Communicator>> {
        Communicator::init_all_on(configs, &vec![Memory::Host; configs.len()])
    }

    /// Ranks of one job in this process, rank i with `configs[i]` on `memory[i]` (one
    /// thread each; GPU ranks connect their GPUs before this returns).
    pub fn init_all_on(configs: &[Config], memory: &[Memory]) -> Result<Vec<Communicator>> {
        let first = configs.first().ok_or_else(|| Error::invalid("init_all: no ranks"))?;
        if memory.len() != configs.len() {
            return Err(Error::invalid(format!("{} memories for {} ranks", memory.len(), configs.len())));
        }
        let (id, n) = (Bootstrap::create_local_id(first)?, configs.len() as u32);
        let handles: Vec<_> = configs
            .iter()
            .zip(memory.iter().copied())
            .enumerate()
            .map(|(rank, (config, memory))| {
                let config = config.clone();
                std::thread::spawn(move || Communicator::init(&id, rank as u32, n, &config)?.with_memory(memory))
            })
            .collect();
        handles.into_iter().map(|h| h.join().map_err(|_| Error::Internal("init thread panicked".into()))?).collect()
    }

    /// Ranks as threads of this process on loopback, on host memory, rank i posing as host
    /// `hosts[i]` (NCCL_HOSTID): for tests of what ranks see of each other.
    #[cfg(test)]
    pub(crate) fn init_posed_hosts(hosts: &[&str]) -> Vec<Communicator> {
        let configs: Vec<Config> = hosts
            .iter()
            .map(|host| {
                let mut c = Config::defaults();
                c.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
                c.set("NCCL_HOSTID", host).unwrap();
                c
            })
            .collect();
        Communicator::init_all_with(&configs).unwrap()
    }

    /// Builds a communicator on host memory over a joined bootstrap.
    pub fn from_bootstrap(boot: Bootstrap, config: &Config) -> Result<Communicator> {
        let placement = host_peers(&boot, config)?;
        Communicator::over(Core::new(boot, placement, config)?, Memory::Host)
    }

    /// This communicator moved onto `memory` (collective: every rank calls it, each with
    /// its own GPU; a GPU communicator connects its ranks here). A communicator already on
    /// `memory` is returned as it is; one must be fresh (no call made yet) to move.
    pub fn with_memory(self, memory: Memory) -> Result<Communicator> {
        if self.memory() == memory {
            return Ok(self);
        }
        if let Backend::Gpu(_) = self.backend {
            return Err(Error::InvalidUsage { what: "a GPU communicator cannot move to other memory: make a new one".into() });
        }
        // `self`, a host communicator that ran nothing, is dropped on return: its stream
        // thread ends, and it connected nothing.
        Communicator::over(self.core.clone(), memory)
    }

    /// Ranks passing the same `color` form a new communicator, ordered by `key` then rank;
    /// [`oxccl_bootstrap::NOCOLOR`] joins none. Collective; reuses the bootstrap connections.
    /// The new communicator's memory is this one's.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator>> {
        if self.revoked().is_none() {
            self.check_usable()?;
        }
        match self.core.boot.split(color, key, AbortFlag::new())? {
            Some(boot) => Ok(Some(Communicator::from_bootstrap(boot, self.config())?.with_memory(self.memory())?)),
            None => Ok(None),
        }
    }

    /// A communicator of this one's ranks minus `exclude` (this communicator's ranks,
    /// typically the failed ones named by an error), ordered as here; ncclCommShrink.
    /// Nothing is asked of the excluded ranks: a dead rank cannot answer. Every survivor
    /// must pass the same list. `abort_first` is NCCL_SHRINK_ABORT: this communicator's
    /// in-flight work is aborted first; without it no operation may be in flight.
    pub fn shrink(&self, exclude: &[usize], abort_first: bool) -> Result<Communicator> {
        if abort_first {
            self.abort();
        }
        let exclude: Vec<u32> = exclude.iter().map(|&r| u32::try_from(r).unwrap_or(u32::MAX)).collect();
        let boot = self.core.boot.shrink(&exclude, AbortFlag::new())?;
        shrunk(&self.core, boot, &exclude, self.memory())
    }

    /// Agrees with the other live ranks on which ranks of this communicator failed
    /// (ULFM's `MPIX_Comm_agree` on the failed group): every rank that returns `Ok` returns
    /// the same sorted list, holding every rank any of them knew as failed, and never one
    /// that returned. Dead ranks are never waited for. Works on a communicator broken by a
    /// failure or aborted; a rank the others count as failed gets an error. Bounded by the
    /// bootstrap timeout. See docs/FAULTS.md for the protocol and its guarantees.
    pub fn agree_failed(&self) -> Result<Vec<usize>> {
        Ok(self.core.boot.agree_failed(&AbortFlag::new())?.into_iter().map(|r| r as usize).collect())
    }

    /// [`Communicator::shrink`] without a list: the live ranks first agree on the failed
    /// ones ([`Communicator::agree_failed`]), then each builds the communicator of the
    /// rest, so that all of them get the same one without anyone naming the dead. The
    /// build is local (no rank waits for another), so every survivor that returns `Ok`
    /// returns the same communicator; a rank failing after the agreement is found by the
    /// new communicator's first collective, on every member. Collective over the live
    /// ranks. Returns the new communicator and the excluded ranks (ranks of this
    /// communicator). `abort_first` as in [`Communicator::shrink`].
    pub fn shrink_failed(&self, abort_first: bool) -> Result<(Communicator, Vec<usize>)> {
        if abort_first {
            self.abort();
        }
        shrink_agreed(&self.core, self.memory(), &AbortFlag::new())
    }

    /// A new unique id for [`Communicator::grow`], its root served by this process
    /// (ncclCommGetUniqueId): one existing rank makes it and hands it to the others and to
    /// the new processes out of band (a broadcast on this communicator, a file, ...). The id
    /// is marked for confirmation ([`UniqueId::with_confirmation`]): a grow through it
    /// succeeds on every surviving rank or on none.
    pub fn grow_id(&self) -> Result<UniqueId> {
        Ok(Bootstrap::create_id(self.config())?.with_confirmation())
    }

    /// A communicator of `nranks` ranks made of this one's ranks, which keep their ranks,
    /// and new processes, which call [`Communicator::init`] with the same `id` and ranks
    /// from `self.nranks()` up (ncclCommGrow). Collective over the existing and the new
    /// ranks, through a new rendezvous at `id`'s root; bounded by the bootstrap timeouts.
    /// A member of this communicator failing before the rendezvous is complete ends the
    /// grow on every rank as soon as it is noticed (OXCCL_HEARTBEAT_TIMEOUT_MS at most; a
    /// killed process at once), not at the timeout. With an id from
    /// [`Communicator::grow_id`], a rank dying during the grow makes it fail on every
    /// survivor (an error naming a failed rank), never on some only. The new communicator's
    /// memory is this one's.
    pub fn grow(&self, nranks: usize, id: &UniqueId) -> Result<Communicator> {
        let n = self.check_grow(nranks)?;
        join(id, self.rank() as u32, n, self.config(), AbortFlag::new(), Some(&self.core.boot))?.with_memory(self.memory())
    }

    /// The new size of a grow to `nranks`, if it is one.
    pub(crate) fn check_grow(&self, nranks: usize) -> Result<u32> {
        if nranks <= self.nranks() {
            return Err(Error::invalid(format!("grow to {nranks} ranks: the communicator already has {}; growing needs more", self.nranks())));
        }
        u32::try_from(nranks).map_err(|_| Error::invalid(format!("grow to {nranks} ranks: too many")))
    }
}

/// Joins `id` as `rank` of `nranks`, every wait ending when `abort` is raised; with
/// `growing`, as a member of that communicator growing to `nranks` (its failures end the
/// wait at the rendezvous: [`Bootstrap::grow`]). With a confirmed id
/// ([`UniqueId::confirmed`]: grows) the ranks then agree on the failed ones over the new
/// bootstrap, and only if none failed is the communicator built (the steps after the
/// agreement wait on no peer), so that the join succeeds on every surviving rank or on
/// none.
pub(crate) fn join(id: &UniqueId, rank: u32, nranks: u32, config: &Config, abort: AbortFlag, growing: Option<&Bootstrap>) -> Result<Communicator> {
    let boot = match growing {
        Some(parent) => parent.grow(id, nranks, config, abort.clone())?,
        None => Bootstrap::init(id, rank, nranks, config, abort.clone())?,
    };
    if !id.confirmed() {
        return Communicator::from_bootstrap(boot, config);
    }
    // A failure here (a rank died during the exchange) is decided on by the agreement.
    let placement = host_peers(&boot, config);
    let failed = boot.agree_failed(&abort)?;
    if let Some(&first) = failed.first() {
        let cause = placement.err().map_or(String::new(), |e| format!("; here: {e}"));
        return Err(Error::PeerFailed { rank: first, reason: format!("ranks {failed:?} of {nranks} failed while joining; the join is given up on every rank{cause}") });
    }
    Communicator::over(Core::new(boot, placement?, config)?, Memory::Host)
}

/// The communicator on `boot`, a shrink of `parent` without `exclude` (checked by the
/// shrink), on `memory`: who shares this rank's host is known here, so no exchange is
/// needed — the survivors' view is the parent's without the excluded ranks.
pub(crate) fn shrunk(parent: &Core, boot: Bootstrap, exclude: &[u32], memory: Memory) -> Result<Communicator> {
    let survivors = |all: &[bool]| all.iter().enumerate().filter(|(r, _)| !exclude.contains(&(*r as u32))).map(|(_, &same)| same).collect();
    let placement = Placement { same_host: survivors(&parent.same_host), same_machine: survivors(&parent.same_machine), same_process: survivors(&parent.same_process) };
    Communicator::over(Core::new(boot, placement, &parent.config)?, memory)
}

/// [`Communicator::shrink_failed`] of `parent`, every wait ending when `abort` is raised.
///
/// One agreement, then a build that is local: the new communicator's members, ranks and
/// who shares whose host all come from the parent and the agreed set, its namespace from
/// the parent's shrink count, and nothing in the build waits for or talks to another rank
/// (its connections are made by its first collective; on a GPU, at init, which waits for
/// the peers). So a rank that fails after the agreement cannot make the build fail on
/// some survivors and succeed on others on host memory: every survivor that returns `Ok`
/// returns the same communicator, as after any failure just after a shrink, and the next
/// collective on it reports the failure to all. (A confirming second agreement was needed
/// while the build exchanged host ids; it cost a whole agreement, 8–15 ms at 16 ranks on 2
/// cores, docs/PERFORMANCE.md.)
pub(crate) fn shrink_agreed(parent: &Core, memory: Memory, abort: &AbortFlag) -> Result<(Communicator, Vec<usize>)> {
    let boot = &parent.boot;
    let failed = boot.agree_failed(abort)?;
    let built = shrunk(parent, boot.shrink(&failed, abort.clone())?, &failed, memory)?;
    Ok((built, failed.into_iter().map(|r| r as usize).collect()))
}

/// Which ranks share this rank's host ([`host_id`]), which its machine ([`machine_id`]:
/// the same unless NCCL_HOSTID poses ranks of one machine as hosts), and which its process
/// ([`process_tag`]: ranks run as threads of it).
fn host_peers(boot: &Bootstrap, config: &Config) -> Result<Placement> {
    const PART: usize = 128;
    let mut record = [0u8; 3 * PART];
    for (i, id) in [host_id(config).into_bytes(), machine_id().into_bytes(), process_tag().to_le_bytes().to_vec()].iter().enumerate() {
        let len = id.len().min(PART);
        record[PART * i..PART * i + len].copy_from_slice(&id[..len]);
    }
    let all = boot.allgather(&record)?;
    let same = |parts: std::ops::Range<usize>| -> Vec<bool> { all.chunks_exact(3 * PART).map(|r| r[parts.clone()] == record[parts.clone()]).collect() };
    Ok(Placement { same_host: same(0..PART), same_machine: same(PART..2 * PART), same_process: same(PART..3 * PART) })
}

#[cfg(test)]
mod tests {
    use crate::Communicator;

    /// Ranks as threads of this process, posing as hosts "a", "b" and "b": each sees the
    /// ranks of the host it claims, and every rank on its machine and in its process (whose
    /// proxy threads they share).
    #[test]
    fn ranks_as_threads_share_the_machine_and_the_process_whatever_host_they_claim() {
        let comms = Communicator::init_posed_hosts(&["a", "b", "b"]);
        let (first, second) = (comms[0].core(), comms[1].core());
        assert_eq!((first.same_host.as_slice(), second.same_host.as_slice()), (&[true, false, false][..], &[false, true, true][..]));
        for core in [first, second] {
            assert_eq!(core.same_machine, [true; 3]);
            assert_eq!(core.same_process, [true; 3]);
        }
    }
}
