//! A call's arguments, checked once for both backends, and the key its plan is cached by.
//!
//! Every collective and send/recv goes validate → plan → backend: [`Communicator`]'s
//! entry points check their arguments here (a caller error leaves the communicator
//! usable), then hand the checked call to the communicator's backend, which plans it under
//! a [`PlanKey`] (the host backend and the GPU backend cache by the same key) and runs it.
//!
//! [`Communicator`]: crate::Communicator

use crate::algo::Collective;
use crate::error::{Error, Result};
use crate::DataType;

/// What a collective's plan depends on besides the communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PlanKey {
    pub collective: Collective,
    pub count: usize,
    pub esize: usize,
    pub root: usize,
}

/// Where a call's buffers live, for the checks that differ: device buffers must be aligned
/// to their elements (the kernels load whole elements); host buffers are read byte-wise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Addresses {
    Host,
    Device,
}

/// A collective's arguments, checked: the byte sizes of this rank's send and receive
/// buffers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checked {
    pub send_bytes: usize,
    pub recv_bytes: usize,
}

/// Checks one collective call on this `rank` of `nranks`: the root is a rank, the byte
/// sizes do not overflow, a buffer that holds elements is not null, device buffers are
/// aligned to their elements. `send` and `recv` are addresses (host pointers or device
/// addresses).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_collective(collective: Collective, send: u64, recv: u64, count: usize, dtype: DataType, nranks: usize, rank: usize, root: usize, addresses: Addresses) -> Result<Checked> {
    if collective.rooted() && root >= nranks {
        return Err(Error::invalid(format!("root {root} is not a rank of this communicator of {nranks}")));
    }
    let esize = dtype.size();
    count.checked_mul(nranks * esize).filter(|&b| b <= isize::MAX as usize).ok_or_else(|| Error::invalid(format!("count {count} of {} overflows", dtype.name())))?;
    let (send_count, recv_count) = collective.buffer_counts(count, nranks, rank, root);
    for (name, address, elements) in [("send", send, send_count), ("recv", recv, recv_count)] {
        if elements > 0 && address == 0 {
            return Err(Error::invalid(format!("{name} buffer is null but holds {elements} elements")));
        }
        if addresses == Addresses::Device && address % esize as u64 != 0 {
            return Err(Error::invalid(format!("{name} buffer 0x{address:x} is not aligned to its {} elements ({esize} bytes)", dtype.name())));
        }
    }
    Ok(Checked { send_bytes: send_count * esize, recv_bytes: recv_count * esize })
}

/// Checks one send or receive of a group: the peer is a rank, a buffer that holds bytes is
/// not null.
pub(crate) fn check_transfer(send: bool, peer: usize, address: u64, bytes: usize, nranks: usize) -> Result<()> {
    if peer >= nranks {
        return Err(Error::invalid(format!("peer {peer} is not a rank of this communicator of {nranks}")));
    }
    if bytes > 0 && address == 0 {
        return Err(Error::invalid(format!("{} buffer is null with {bytes} bytes", if send { "send" } else { "recv" })));
    }
    Ok(())
}

/// A group's sends to the calling rank itself must meet as many receives from it, the k-th
/// send with the k-th receive, of equal size (NCCL's pairing): `sends` and `recvs` are
/// their sizes in call order.
pub(crate) fn check_own_transfers(sends: impl Iterator<Item = usize> + Clone, recvs: impl Iterator<Item = usize> + Clone) -> Result<()> {
    let (s, r) = (sends.clone().count(), recvs.clone().count());
    if s != r {
        return Err(Error::invalid(format!("{s} sends to this rank but {r} receives from it in one group")));
    }
    match sends.zip(recvs).find(|(s, r)| s != r) {
        Some((s, r)) => Err(Error::invalid(format!("a send of {s} bytes to this rank meets a receive of {r} bytes"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_collective_calls_are_named() {
        let check = |collective, send, recv, count, root, addresses| check_collective(collective, send, recv, count, DataType::Float32, 4, 1, root, addresses).map_err(|e| e.to_string());
        assert!(check(Collective::Reduce, 8, 8, 4, 4, Addresses::Host).unwrap_err().contains("root 4"));
        assert!(check(Collective::AllReduce, 0, 8, 4, 0, Addresses::Host).unwrap_err().contains("send buffer is null"));
        assert!(check(Collective::AllReduce, 8, 0, 4, 0, Addresses::Host).unwrap_err().contains("recv buffer is null"));
        assert!(check(Collective::AllReduce, 8, 8, usize::MAX / 2, 0, Addresses::Host).unwrap_err().contains("overflows"));
        assert!(check(Collective::AllReduce, 9, 8, 4, 0, Addresses::Device).unwrap_err().contains("not aligned"));
        assert!(check(Collective::AllReduce, 9, 8, 4, 0, Addresses::Host).is_ok(), "host buffers are read byte-wise");
        assert!(check(Collective::AllReduce, 0, 0, 0, 0, Addresses::Device).is_ok(), "nothing to hold, nothing to check");
        // Rank 1 is not the root: a gather's receive buffer holds nothing there.
        let checked = check_collective(Collective::Gather, 8, 0, 4, DataType::Float32, 4, 1, 0, Addresses::Host).unwrap();
        assert_eq!((checked.send_bytes, checked.recv_bytes), (16, 0));
    }

    #[test]
    fn own_transfers_pair_in_order() {
        assert!(check_own_transfers([4, 8].into_iter(), [4, 8].into_iter()).is_ok());
        assert!(check_own_transfers([4].into_iter(), [].into_iter()).unwrap_err().to_string().contains("1 sends"));
        assert!(check_own_transfers([4, 8].into_iter(), [8, 4].into_iter()).unwrap_err().to_string().contains("4 bytes"));
        assert!(check_transfer(true, 5, 8, 4, 4).unwrap_err().to_string().contains("peer 5"));
        assert!(check_transfer(false, 1, 0, 4, 4).unwrap_err().to_string().contains("recv buffer is null"));
    }
}
