//! Tuner plugins: the [`TunerPlugin`] trait the tuner calls, and the loader of NCCL's C
//! tuner plugins (`NCCL_TUNER_PLUGIN`), one small file per ABI version NCCL 2.28-2.30 read
//! (v2 ... v6), each turning its vtable into the trait.
//!
//! As NCCL: `NCCL_TUNER_PLUGIN` names a library (tried as given, then as
//! `libnccl-tuner-<name>.so` unless it is a path or a `lib*.so` name), `none` disables
//! plugins, unset tries `libnccl-tuner.so`; the newest symbol found wins
//! (`ncclTunerPlugin_v6` down to `_v2`). `init` runs once per communicator with its id,
//! rank and node counts, NVLink domains and (v5, v6) the model's constants to edit;
//! `getCollInfo` sees each call's cost table (the seven NCCL rows, -1 for pairs that cannot
//! run) and channel count and may edit both; `finalize` runs when the communicator is
//! done. A v2 plugin's (algorithm, protocol) answer becomes a 0.0 in its table entry, as
//! NCCL's shim does.
//!
//! Unlike NCCL, which notes and ignores them, a plugin asked for by name that cannot be
//! found, exports no tuner, or fails `init` is an error naming it, and so is an error from
//! `getCollInfo` (NCCL 2.28 also propagates that one).

mod c;
mod v2;
mod v3;
mod v4;
mod v5;
mod v6;

use crate::collective::Collective;
use crate::error::Result;
use crate::names::{Algorithm, Protocol};
use crate::nccl::Constants;
use crate::table::CostTable;

pub use c::CPlugin;

/// NVLink domains of the communicator (what v5+ plugins receive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvlDomains {
    pub count: i32,
    pub min_ranks: i32,
    pub max_ranks: i32,
}

/// What a plugin's `init` is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitInfo {
    pub comm_id: u64,
    pub nranks: usize,
    pub nnodes: usize,
    pub nvl_domains: NvlDomains,
}

/// A tuner: sees and edits each call's cost table and channel count.
pub trait TunerPlugin: Send + Sync {
    fn name(&self) -> &str;

    /// Edits `table` (NCCL's rows; -1 entries cannot run) and may set `channels` (0: unset).
    fn get_coll_info(&self, collective: Collective, bytes: usize, pipe_ops: usize, table: &mut CostTable, registered: bool, channels: &mut usize) -> Result<()>;

    /// May change the chunk size chosen for a call (v6's `getChunkSize`); the default keeps it.
    fn chunk_size(&self, _collective: Collective, _bytes: usize, _algorithm: Algorithm, _protocol: Protocol, _channels: usize, chunk: usize) -> Result<usize> {
        Ok(chunk)
    }
}

/// Loads the tuner `NCCL_TUNER_PLUGIN` names (`setting`; None: unset) and runs its `init`,
/// which may edit `constants`. None: no plugin (unset and no `libnccl-tuner.so`, or `none`).
pub fn load(setting: Option<&str>, info: &InitInfo, constants: &mut Constants) -> Result<Option<Box<dyn TunerPlugin>>> {
    Ok(CPlugin::load(setting, info, constants)?.map(|p| Box::new(p) as Box<dyn TunerPlugin>))
}
