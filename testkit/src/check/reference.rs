//! GPU calls checked against the CPU running the same path, bit for bit, on random inputs.
//!
//! The matrix of [`super`] feeds small integers, so that any order of reduction gives the
//! exact answer and the check needs nothing but the collectives' definitions. These inputs
//! take every bit pattern instead (NaN, infinities, subnormals, values whose sums and
//! products round), so the answer depends on the order of the reduction. The reference
//! asks the GPU communicator which [`Route`] the call takes and computes that route on the
//! CPU with the host executor's arithmetic (oxccl-kernels' `ReducePlan`: each rank's input
//! premultiplied, every step's combine, integer Avg's division):
//!
//! - the executor kernel's schedule: every rank's lanes of `algo::plan(shape, algorithm)`,
//!   the same plan the kernel was given, run by the schedule interpreter (`algo::simulate`),
//!   which combines as the host executor does, `received op local`;
//! - the direct kernel: the ranks' contributions folded in rank order;
//! - copies (LL exchanges, and broadcast and all_gather on the direct kernel): the
//!   collective's definition.
//!
//! The GPU must hold the same bits, but for the payload of a NaN that a reduction made
//! (CUDA's arithmetic returns its canonical NaN, the CPU's keeps an operand's payload).

use oxccl_kernels::{combine_into, Combine, ReducePlan};

use super::{copied, decode, encode, on_gpu, rank_op, run_checked, Case, Mismatch};
use oxccl_runtime::algo::{self, Algorithm, Options, Shape};
use oxccl_runtime::gpu::{DeviceBuffer, Route, Stream};
use oxccl_runtime::{Collective, Communicator, DataType, Error, Result};

/// Rank `rank`'s input for `case`, drawn from `seed` (every rank can draw every rank's):
/// integers and one float element in four take random bits, the other floats random values
/// in [-4, 4) with every mantissa bit used.
pub fn random_input(case: &Case, rank: usize, n: usize, seed: u64) -> Vec<u8> {
    let (send_count, _) = case.collective.buffer_counts(case.count, n, rank, case.root);
    let es = case.dtype.size();
    let mut state = seed ^ (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut bytes = Vec::with_capacity(send_count * es);
    for i in 0..send_count {
        let r = splitmix64(&mut state);
        if case.dtype.is_float() && i % 4 != 3 {
            let x = (r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0;
            bytes.extend_from_slice(&encode(case.dtype, x));
        } else {
            bytes.extend_from_slice(&r.to_ne_bytes()[..es]);
        }
    }
    bytes
}

/// What every rank holds after `case` ran by `route`, `inputs[r]` being rank r's input:
/// the route computed on the CPU (see the module's doc). An error for a staged route,
/// which runs on the host data path itself.
pub fn gpu_reference(route: &Route, case: &Case, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let n = inputs.len();
    if case.count == 0 {
        return Ok(vec![Vec::new(); n]);
    }
    let reduces = case.collective.reduces();
    let plans: Vec<ReducePlan> = if reduces { (0..n).map(|r| ReducePlan::new(rank_op(case.op, r), case.dtype, n)).collect::<std::result::Result<_, _>>()? } else { Vec::new() };
    let prepared: Vec<Vec<u8>> = if reduces {
        inputs
            .iter()
            .zip(&plans)
            .map(|(input, plan)| {
                let mut scaled = vec![0; input.len()];
                plan.prepare_input(&mut scaled, input).map(|()| scaled)
            })
            .collect::<std::result::Result<_, _>>()?
    } else {
        inputs.to_vec()
    };
    let mut outputs = match *route {
        Route::Schedule { shape, algorithm, .. } => simulated(shape, algorithm, case, &prepared)?,
        // Twice (reduce_scatter, all_gather) folds each block once, in rank order too.
        Route::Direct { .. } | Route::TwoShot if reduces => folded_in_rank_order(case, &prepared)?,
        Route::Direct { .. } | Route::Exchange if !reduces => (0..n).map(|r| copied(case, inputs, r)).collect(),
        Route::Staged => return Err(Error::InvalidArgument { what: format!("{case}: staged through host memory, it runs on the host data path: no GPU route to check") }),
        Route::TwoShot => return Err(Error::Internal(format!("{case}: only all_reduce goes twice, not to {route:?}"))),
        Route::Direct { .. } | Route::Exchange => return Err(Error::Internal(format!("{case}: a reducing collective routed to {route:?}"))),
    };
    for (output, plan) in outputs.iter_mut().zip(&plans) {
        plan.finalize(output)?;
    }
    Ok(outputs)
}

/// Runs `case` on `comm`'s GPU with inputs drawn from `seed`, and checks the output bit
/// for bit against [`gpu_reference`] for the route the call takes (a NaN a reduction made
/// matching any NaN), and the guard bytes and the input as [`super::run_case_on_gpu`] does.
pub fn run_random_case_on_gpu(comm: &Communicator, stream: &Stream, send: &DeviceBuffer, recv: &DeviceBuffer, case: &Case, seed: u64) -> Result<Option<Mismatch>> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(case, r, n, seed)).collect();
    let route = comm.route(case.collective, case.count, case.dtype, case.root)?;
    let expected = gpu_reference(&route, case, &inputs)?.swap_remove(rank);
    run_checked(case, rank, n, &inputs[rank], on_gpu(comm, stream, send, recv, case), &expected, |got, expected| same_bits(case, &route, got, expected))
}

/// Every rank's output of `algorithm`'s schedule for `shape` on `prepared` inputs, run by
/// the schedule interpreter with oxccl-kernels' combine.
fn simulated(shape: Shape, algorithm: Algorithm, case: &Case, prepared: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let (dtype, es) = (case.dtype, case.dtype.size());
    let schedule = algo::plan(shape, algorithm).map_err(|e| Error::InvalidArgument { what: e.to_string() })?;
    let inputs: Vec<Vec<u64>> = prepared.iter().map(|bytes| bytes.chunks_exact(es).map(element).collect()).collect();
    let combine = |received: &u64, local: &u64| combined(dtype, case.op.combine(), *received, *local);
    let options = Options { in_place: case.in_place && case.collective.has_in_place(), check_races: false, ..Options::default() };
    let outputs = algo::simulate(&schedule, &inputs, combine, &options).map_err(|e| Error::Internal(format!("{case}: the schedule interpreter failed: {e}")))?;
    outputs
        .into_iter()
        .enumerate()
        .map(|(rank, output)| {
            let mut bytes = Vec::with_capacity(output.len() * es);
            for (k, e) in output.into_iter().enumerate() {
                let e = e.ok_or_else(|| Error::Internal(format!("{case}: the schedule leaves element {k} of rank {rank}'s output unwritten")))?;
                bytes.extend_from_slice(&e.to_ne_bytes()[..es]);
            }
            Ok(bytes)
        })
        .collect()
}

/// The direct kernel's reductions: block b of every rank's prepared input, folded in rank
/// order, `((x0 op x1) op x2) ...`; rank r holds block 0 (all_reduce; reduce: the root
/// only) or block r (reduce_scatter).
fn folded_in_rank_order(case: &Case, prepared: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let bytes = case.count * case.dtype.size();
    let fold = |block: usize| -> Result<Vec<u8>> {
        let part = |r: usize| &prepared[r][block * bytes..(block + 1) * bytes];
        let mut acc = part(0).to_vec();
        for r in 1..prepared.len() {
            let mut next = vec![0; bytes];
            combine_into(case.dtype, case.op.combine(), &mut next, &acc, part(r))?;
            acc = next;
        }
        Ok(acc)
    };
    let n = prepared.len();
    match case.collective {
        Collective::AllReduce => Ok(vec![fold(0)?; n]),
        Collective::Reduce => (0..n).map(|rank| if rank == case.root { fold(0) } else { Ok(Vec::new()) }).collect(),
        Collective::ReduceScatter => (0..n).map(fold).collect(),
        other => Err(Error::Internal(format!("{} does not reduce on the direct kernel", other.name()))),
    }
}

/// Whether `got` holds `expected`'s bits, element by element; where a reduction made a NaN
/// any NaN will do.
fn same_bits(case: &Case, route: &Route, got: &[u8], expected: &[u8]) -> Option<Mismatch> {
    let (dtype, es) = (case.dtype, case.dtype.size());
    let reduced_nan = |e: &[u8]| case.collective.reduces() && dtype.is_float() && decode(dtype, e).is_nan();
    let mut mismatch: Option<Mismatch> = None;
    for (k, (g, e)) in got.chunks_exact(es).zip(expected.chunks_exact(es)).enumerate() {
        if g == e || (reduced_nan(g) && reduced_nan(e)) {
            continue;
        }
        match &mut mismatch {
            Some(m) => m.wrong += 1,
            None => {
                let first = format!("element {k}: got bytes {g:02x?} ({}), the CPU running {route:?} holds {e:02x?} ({})", decode(dtype, g), decode(dtype, e));
                mismatch = Some(Mismatch { wrong: 1, first });
            }
        }
    }
    mismatch
}

/// One element's bytes (up to 8), as the low bytes of a u64 in native order.
fn element(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_ne_bytes(word)
}

/// `a op b` on one element of `dtype` held as [`element`] holds it.
fn combined(dtype: DataType, op: Combine, a: u64, b: u64) -> u64 {
    let es = dtype.size();
    let mut out = [0u8; 8];
    // One whole element on each side: the lengths agree, so the combine cannot fail.
    combine_into(dtype, op, &mut out[..es], &a.to_ne_bytes()[..es], &b.to_ne_bytes()[..es]).expect("one element each side");
    u64::from_ne_bytes(out)
}

/// SplitMix64: a small generator whose stream a seed fixes.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D1_049B_D133_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::super::{compare, expected_output, full_matrix, input};
    use super::*;
    use oxccl_runtime::ReduceOp;

    /// The routes a call of `case` could take among `n` ranks: the direct kernel or an LL
    /// exchange where the collective has one, and its schedule on 1 and 3 channels with
    /// small chunks.
    fn routes(case: &Case, n: usize) -> Vec<Route> {
        let exchanges = matches!(case.collective, Collective::AllToAll | Collective::Gather | Collective::Scatter);
        let algorithm = if exchanges { Algorithm::Direct } else { Algorithm::Ring };
        let mut routes: Vec<Route> = [1, 3].map(|channels| Route::Schedule { shape: Shape { collective: case.collective, count: case.count, nranks: n, root: case.root, chunk: 64, channels, per_host: 1 }, algorithm, ll: false }).into();
        routes.push(if exchanges { Route::Exchange } else { Route::Direct { ll128: false } });
        routes
    }

    /// On the matrix's small integers, where any order of reduction is exact, every route's
    /// reference is what the collective's definition says.
    #[test]
    fn every_route_computes_the_collective() {
        for n in [2, 3, 4] {
            for case in full_matrix(n, &[1, 7, 300]) {
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(&case, r, n)).collect();
                for route in routes(&case, n) {
                    let outputs = gpu_reference(&route, &case, &inputs).unwrap_or_else(|e| panic!("{case} by {route:?}: {e}"));
                    for (rank, output) in outputs.iter().enumerate() {
                        let mismatch = compare(&case, n, output, &expected_output(&case, rank, n));
                        assert!(mismatch.is_none(), "{case} by {route:?}, rank {rank}: {}", mismatch.unwrap());
                    }
                }
            }
        }
    }

    /// On random inputs the order of the reduction shows in the bits: the direct kernel's
    /// fold and the ring on one or on two channels each give some element other bits, so a
    /// GPU path that reduced in another order than its route says would fail the check.
    #[test]
    fn random_inputs_show_the_order_of_the_reduction() {
        let n = 4;
        for dtype in [DataType::Float32, DataType::Bfloat16, DataType::Float8E4M3] {
            let case = Case { collective: Collective::AllReduce, dtype, op: ReduceOp::Sum, count: 4099, root: 0, in_place: false };
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(&case, r, n, 7)).collect();
            let ring = |channels| Route::Schedule { shape: Shape { collective: case.collective, count: case.count, nranks: n, root: 0, chunk: 1024, channels, per_host: 1 }, algorithm: Algorithm::Ring, ll: false };
            let outputs: Vec<Vec<u8>> = [Route::Direct { ll128: false }, ring(1), ring(2)].iter().map(|route| gpu_reference(route, &case, &inputs).unwrap().swap_remove(0)).collect();
            for (a, b) in [(0, 1), (0, 2), (1, 2)] {
                assert!(same_bits(&case, &Route::Direct { ll128: false }, &outputs[a], &outputs[b]).is_some(), "{dtype:?}: routes {a} and {b} agree on every element");
            }
            // Every rank of one route holds the same bits (no NaN payload aside: the CPU keeps them).
            let ring = gpu_reference(&ring(2), &case, &inputs).unwrap();
            assert!(ring.iter().all(|o| o == &ring[0]), "{dtype:?}: the ranks of one ring differ");
        }
    }

    /// Inputs take every kind of value: NaNs, infinities and subnormals among the floats.
    #[test]
    fn random_inputs_reach_special_values() {
        let case = Case { collective: Collective::AllReduce, dtype: DataType::Float16, op: ReduceOp::Sum, count: 1 << 16, root: 0, in_place: false };
        let values: Vec<f64> = random_input(&case, 1, 2, 3).chunks_exact(2).map(|e| decode(case.dtype, e)).collect();
        assert!(values.iter().any(|v| v.is_nan()) && values.iter().any(|v| v.is_infinite()));
        assert!(values.iter().any(|v| *v != 0.0 && v.abs() < 2f64.powi(-14)), "no subnormal");
        assert!(values.iter().filter(|v| v.abs() < 4.0).count() > values.len() / 2);
        assert_ne!(random_input(&case, 0, 2, 3), random_input(&case, 1, 2, 3));
        assert_eq!(random_input(&case, 1, 2, 3), random_input(&case, 1, 2, 3));
    }

    /// Bits must match, except that a NaN a reduction made may be any NaN.
    #[test]
    fn only_a_reduced_nan_may_differ_in_its_bits() {
        let quiet = f32::NAN.to_ne_bytes().to_vec();
        let payload = f32::from_bits(0x7fc0_0001).to_ne_bytes().to_vec();
        let reduce = Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: 1, root: 0, in_place: false };
        let copy = Case { collective: Collective::Broadcast, ..reduce };
        assert!(same_bits(&reduce, &Route::Direct { ll128: false }, &quiet, &payload).is_none());
        assert!(same_bits(&copy, &Route::Direct { ll128: false }, &quiet, &payload).is_some(), "a copy must keep a NaN's payload");
        assert!(same_bits(&reduce, &Route::Direct { ll128: false }, &1f32.to_ne_bytes(), &1.0000001f32.to_ne_bytes()).is_some());
        let m = same_bits(&reduce, &Route::Direct { ll128: false }, &[quiet.clone(), quiet].concat(), &[payload, 2f32.to_ne_bytes().to_vec()].concat()).unwrap();
        assert_eq!(m.wrong, 1);
        assert!(m.first.starts_with("element 1:"), "{}", m.first);
    }
}
