//! Checking collectives against their definitions: the test matrix of the runtime's tests
//! and `oxccl-perf -c 1` (the `check` feature).
//!
//! Every rank derives every rank's input from (rank, element index), so each checks its
//! own output against a reference computed here, directly from the definitions of the
//! collectives: nothing of the schedules, the executor or the kernels' reduction loops is
//! used. Reducing inputs are small integers (and products of ±1 and 2), so that sums,
//! products, maxima and minima are exact in every datatype whatever the order of the
//! reduction; where rounding is part of the definition (float Avg's 1/n scalar, fp8 and
//! half sums beyond their exact integers, PreMulSum products), floats are compared within
//! n+1 roundings of the datatype. Integers, copies, max and min must match bit for bit.

use half::{bf16, f16};
use oxccl_kernels::fp8::Format;
use oxccl_kernels::Scalar;
use oxccl_runtime::gpu::{DeviceBuffer, Stream};
use oxccl_runtime::{Collective, Communicator, DataType, ReduceOp, Result};

mod reference;
pub use reference::{gpu_reference, random_input, run_random_case_on_gpu};

/// Element counts of the small sizes: 0, 1, 7 and 4 KiB + 3.
pub const SMALL_COUNTS: [usize; 4] = [0, 1, 7, 4099];

/// One collective call.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub collective: Collective,
    pub dtype: DataType,
    /// For PreMulSum the scalar is per rank (rank + 1); the op's own scalar is ignored.
    pub op: ReduceOp,
    pub count: usize,
    pub root: usize,
    pub in_place: bool,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} count {} root {} {}",
            self.collective.name(),
            self.dtype.name(),
            self.op.name(),
            self.count,
            self.root,
            if self.in_place { "in place" } else { "out of place" }
        )
    }
}

/// The ops a collective takes: all six for reducing ones, none (Sum stands in) otherwise.
pub fn ops(collective: Collective) -> Vec<ReduceOp> {
    if collective.reduces() {
        vec![ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum(Scalar::F64(1.0))]
    } else {
        vec![ReduceOp::Sum]
    }
}

/// Every collective × dtype × op × count × placement, with roots cycling over the ranks.
pub fn full_matrix(nranks: usize, counts: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for collective in Collective::ALL {
        for dtype in DataType::ALL {
            for op in ops(collective) {
                for &count in counts {
                    for in_place in [false, true] {
                        if in_place && !collective.has_in_place() {
                            continue;
                        }
                        let root = if collective.rooted() { (cases.len() * 7 + count) % nranks } else { 0 };
                        cases.push(Case { collective, dtype, op, count, root, in_place });
                    }
                }
            }
        }
    }
    cases
}

/// all_to_all in place (send and recv one buffer) at `counts` in `dtype`: NCCL's in-place
/// conventions leave it out, and so does [`full_matrix`], but nccl-tests runs it and MPI
/// allows it (`MPI_IN_PLACE`); oxccl serves it on GPU and on host memory.
pub fn all_to_all_in_place(dtype: DataType, counts: &[usize]) -> Vec<Case> {
    counts.iter().map(|&count| Case { collective: Collective::AllToAll, dtype, op: ReduceOp::Sum, count, root: 0, in_place: true }).collect()
}

/// Every collective once at `bytes` of data per rank block, f32 sum and in both placements,
/// plus all_reduce of the odd datatypes.
pub fn large_cases(nranks: usize, bytes: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    for collective in Collective::ALL {
        for in_place in [false, true] {
            if in_place && !collective.has_in_place() {
                continue;
            }
            let root = if collective.rooted() { nranks - 1 } else { 0 };
            cases.push(Case { collective, dtype: DataType::Float32, op: ReduceOp::Sum, count: bytes / 4 + 3, root, in_place });
        }
    }
    for (dtype, op) in [(DataType::Bfloat16, ReduceOp::Avg), (DataType::Float8E4M3, ReduceOp::Max), (DataType::Int64, ReduceOp::Prod), (DataType::Uint8, ReduceOp::Min)] {
        cases.push(Case { collective: Collective::AllReduce, dtype, op, count: bytes / dtype.size() + 1, root: 0, in_place: false });
    }
    cases
}

/// Runs `cases` in order on this rank; returns a description of each failure (mismatches
/// are reported, not panicked on, so that the other ranks keep in step). A collective that
/// returns an error ends the run: the other ranks would wait for this one.
pub fn run_cases(comm: &Communicator, cases: &[Case]) -> Vec<String> {
    run_each(comm.rank(), cases, |_, case| run_case(comm, case))
}

/// As [`run_cases`], each case run by `run` (given its index, e.g. for a seed) on `rank`.
pub fn run_each(rank: usize, cases: &[Case], mut run: impl FnMut(usize, &Case) -> Result<Option<Mismatch>>) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        match run(i, case) {
            Ok(None) => {}
            Ok(Some(mismatch)) => failures.push(format!("rank {rank}: {case}: {mismatch}")),
            Err(e) => {
                failures.push(format!("rank {rank}: {case}: error: {e}"));
                break;
            }
        }
    }
    failures
}

const GUARD: usize = 16;
const POISON: u8 = 0xA5;

/// A wrong result: how many elements are wrong and what the first one is.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub wrong: usize,
    pub first: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} wrong, first: {}", self.wrong, self.first)
    }
}

impl Mismatch {
    fn one(what: &str) -> Mismatch {
        Mismatch { wrong: 1, first: what.into() }
    }
}

/// Where a case's buffers lie relative to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Separate send and recv buffers.
    Separate,
    /// In place, the output is the block of the send buffer at this byte offset (recv is
    /// unused).
    OutputInInput { recv_offset: usize },
    /// In place, the input is the block of the recv buffer at this byte offset (send is
    /// unused).
    InputInOutput { send_offset: usize },
}

/// Runs one case on the host communicator; `Ok(Some(..))` describes a wrong result.
pub fn run_case(comm: &Communicator, case: &Case) -> Result<Option<Mismatch>> {
    run_case_with(case, comm.rank(), comm.nranks(), |send, recv, placement, op| {
        let work = match placement {
            Placement::OutputInInput { recv_offset } => {
                let base = send.as_mut_ptr();
                // SAFETY: both pointers are inside `send`, sized for the collective, and the
                // buffer is untouched until the work completes.
                unsafe { comm.enqueue_collective(case.collective, base, base.add(recv_offset), case.count, case.dtype, op, case.root)? }
            }
            Placement::InputInOutput { send_offset } => {
                let base = recv.as_mut_ptr();
                // SAFETY: as above, inside `recv`.
                unsafe { comm.enqueue_collective(case.collective, base.add(send_offset), base, case.count, case.dtype, op, case.root)? }
            }
            // SAFETY: separate buffers sized for the collective, untouched until completion.
            Placement::Separate => unsafe { comm.enqueue_collective(case.collective, send.as_ptr(), recv.as_mut_ptr(), case.count, case.dtype, op, case.root)? },
        };
        work.wait()
    })
}

/// Runs one case of rank `rank` of `n` through `run`, which performs the collective on the
/// buffers it is given (poisoned around and after the input, laid out as the placement
/// says, with the op this rank passes: PreMulSum's scalar is per rank) and leaves the
/// results in them — on the host, or copied to a GPU and back. Then checks the output, the
/// guard bytes after it, and that an out-of-place input was left alone.
pub fn run_case_with(case: &Case, rank: usize, n: usize, run: impl FnOnce(&mut [u8], &mut [u8], Placement, ReduceOp) -> Result<()>) -> Result<Option<Mismatch>> {
    run_checked(case, rank, n, &input(case, rank, n), run, &expected_output(case, rank, n), |got, expected| compare(case, n, got, expected))
}

/// [`run_case_with`] with this rank's input and the output it must hold given, and
/// `compare(got, expected)` judging the output.
fn run_checked(
    case: &Case,
    rank: usize,
    n: usize,
    my_input: &[u8],
    run: impl FnOnce(&mut [u8], &mut [u8], Placement, ReduceOp) -> Result<()>,
    expected: &[u8],
    compare: impl FnOnce(&[u8], &[u8]) -> Option<Mismatch>,
) -> Result<Option<Mismatch>> {
    let es = case.dtype.size();
    let (send_count, recv_count) = case.collective.buffer_counts(case.count, n, rank, case.root);
    assert_eq!(my_input.len(), send_count * es);
    assert_eq!(expected.len(), recv_count * es);
    // In place, the input lives inside the output buffer (or the output inside the input)
    // where NCCL's conventions put it.
    let send_offset = case.collective.in_place_send_offset(case.count, rank, case.root).unwrap_or(0) * es;
    let recv_offset = case.collective.in_place_recv_offset(case.count, rank, case.root).unwrap_or(0) * es;
    let mut send = vec![POISON; my_input.len() + GUARD];
    let mut recv = vec![POISON; recv_count * es + GUARD];
    let output_in_input = case.in_place && case.collective.in_place_recv_offset(case.count, rank, case.root).is_some();
    let placement = if !case.in_place {
        send[..my_input.len()].copy_from_slice(my_input);
        Placement::Separate
    } else if output_in_input {
        send[..my_input.len()].copy_from_slice(my_input);
        Placement::OutputInInput { recv_offset }
    } else {
        if recv.len() < send_offset + my_input.len() + GUARD {
            recv.resize(send_offset + my_input.len() + GUARD, POISON);
        }
        recv[send_offset..send_offset + my_input.len()].copy_from_slice(my_input);
        Placement::InputInOutput { send_offset }
    };
    run(&mut send, &mut recv, placement, rank_op(case.op, rank))?;

    let (out, guard) = if output_in_input {
        (&send[recv_offset..recv_offset + expected.len()], &send[my_input.len()..])
    } else {
        (&recv[..expected.len()], &recv[recv.len() - GUARD..])
    };
    if let Some(m) = compare(out, expected) {
        return Ok(Some(m));
    }
    if guard.iter().any(|&b| b != POISON) {
        return Ok(Some(Mismatch::one("wrote past the end of its buffer")));
    }
    if !case.in_place && send[..my_input.len()] != my_input[..] {
        return Ok(Some(Mismatch::one("changed the send buffer")));
    }
    Ok(None)
}

/// The op rank `rank` passes for a case of `op`: PreMulSum's scalar is rank + 1.
fn rank_op(op: ReduceOp, rank: usize) -> ReduceOp {
    match op {
        ReduceOp::PreMulSum(_) => ReduceOp::PreMulSum(Scalar::F64((rank + 1) as f64)),
        op => op,
    }
}

/// This rank's input bytes.
pub fn input(case: &Case, rank: usize, n: usize) -> Vec<u8> {
    let (send_count, _) = case.collective.buffer_counts(case.count, n, rank, case.root);
    if !case.collective.reduces() {
        // Copies: any bytes will do; these differ per rank and position.
        return (0..send_count * case.dtype.size()).map(|i| ((rank * 131 + i * 7 + 13) % 251) as u8).collect();
    }
    let mut bytes = Vec::with_capacity(send_count * case.dtype.size());
    for i in 0..send_count {
        bytes.extend_from_slice(&encode(case.dtype, value(case, rank, i)));
    }
    bytes
}

/// The reducing input of `rank` at element `i`.
fn value(case: &Case, rank: usize, i: usize) -> f64 {
    let signed = case.dtype.is_float() || case.dtype.is_signed_integer();
    if case.op == ReduceOp::Prod {
        let pattern = [1.0, 2.0, 1.0, if signed { -1.0 } else { 1.0 }];
        pattern[(rank * 3 + i) % 4]
    } else {
        ((rank * 5 + i * 3 + 1) % 7) as f64 - if signed { 3.0 } else { 0.0 }
    }
}

/// The output this rank must hold, in bytes.
fn expected_output(case: &Case, rank: usize, n: usize) -> Vec<u8> {
    let is_root = rank == case.root;
    match case.collective {
        Collective::AllReduce => reduced(case, n, 0),
        Collective::Reduce if is_root => reduced(case, n, 0),
        Collective::Reduce => vec![],
        Collective::ReduceScatter => reduced(case, n, rank * case.count),
        _ => copied(case, &(0..n).map(|r| input(case, r, n)).collect::<Vec<_>>(), rank),
    }
}

/// What a collective that only copies (broadcast, all_gather, gather, scatter, alltoall)
/// leaves on `rank`, from every rank's input (reducing ones are not copies).
fn copied(case: &Case, inputs: &[Vec<u8>], rank: usize) -> Vec<u8> {
    let bytes = case.count * case.dtype.size();
    let block = |r: usize, b: usize| inputs[r][b * bytes..(b + 1) * bytes].to_vec();
    let is_root = rank == case.root;
    match case.collective {
        Collective::Broadcast => inputs[case.root].clone(),
        Collective::AllGather => inputs.concat(),
        Collective::Gather if is_root => inputs.concat(),
        Collective::Gather => vec![],
        Collective::Scatter => block(case.root, rank),
        Collective::AllToAll => (0..inputs.len()).flat_map(|p| block(p, rank)).collect(),
        reducing => unreachable!("{} reduces: it is not a copy", reducing.name()),
    }
}

/// The reduction over ranks of elements `first..first + count`, each element encoded, and
/// for floats with the reference's value kept for the tolerance check.
fn reduced(case: &Case, n: usize, first: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(case.count * case.dtype.size());
    for i in first..first + case.count {
        out.extend_from_slice(&encode(case.dtype, reference(case, n, i)));
    }
    out
}

/// The reference value of reduced element `i`.
fn reference(case: &Case, n: usize, i: usize) -> f64 {
    let xs: Vec<f64> = (0..n).map(|r| value(case, r, i)).collect();
    let float = case.dtype.is_float();
    match case.op {
        ReduceOp::Sum => xs.iter().sum(),
        ReduceOp::Prod => xs.iter().product(),
        ReduceOp::Max => xs.iter().copied().fold(f64::MIN, f64::max),
        ReduceOp::Min => xs.iter().copied().fold(f64::MAX, f64::min),
        ReduceOp::Avg if float => {
            // NCCL: each input times float(1/n) rounded to the datatype (double(1/n) for
            // float64).
            let inverse = 1.0 / n as f64;
            let scalar = if case.dtype == DataType::Float64 { inverse } else { round(case.dtype, inverse as f32 as f64) };
            xs.iter().map(|x| round(case.dtype, x * scalar)).sum()
        }
        // Integers: the sum divided by n, truncating toward zero.
        ReduceOp::Avg => (xs.iter().sum::<f64>() / n as f64).trunc(),
        ReduceOp::PreMulSum(_) => xs.iter().enumerate().map(|(r, x)| x * (r + 1) as f64).sum(),
    }
}

fn compare(case: &Case, n: usize, got: &[u8], expected: &[u8]) -> Option<Mismatch> {
    if got == expected {
        return None;
    }
    let mut mismatch: Option<Mismatch> = None;
    let mut note = |what: String| match &mut mismatch {
        Some(m) => m.wrong += 1,
        None => mismatch = Some(Mismatch { wrong: 1, first: what }),
    };
    let es = case.dtype.size();
    let exact = !case.dtype.is_float() || !case.collective.reduces() || matches!(case.op, ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod);
    for (k, (g, e)) in got.chunks_exact(es).zip(expected.chunks_exact(es)).enumerate() {
        if g == e {
            continue;
        }
        if exact {
            note(format!("element {k}: got bytes {g:02x?}, expected {e:02x?}"));
            continue;
        }
        let (gv, ev) = (decode(case.dtype, g), decode(case.dtype, e));
        let tolerance = (n as f64 + 1.0) * epsilon(case.dtype) * magnitude_bound(case, n) + tiny(case.dtype);
        if (gv - ev).abs() > tolerance || gv.is_nan() {
            note(format!("element {k}: got {gv}, expected {ev} (tolerance {tolerance})"));
        }
    }
    mismatch
}

/// An upper bound on the sum of term magnitudes of any element of this case.
fn magnitude_bound(case: &Case, n: usize) -> f64 {
    // Inputs are at most 3 (6 unsigned) in magnitude; PreMulSum multiplies by at most n.
    let x = 6.0;
    match case.op {
        ReduceOp::PreMulSum(_) => x * (n * n) as f64,
        _ => x * n as f64 * 2.0,
    }
}

/// The unit roundoff of a float datatype.
fn epsilon(dtype: DataType) -> f64 {
    match dtype {
        DataType::Float64 => f64::EPSILON,
        DataType::Float32 => f32::EPSILON as f64,
        DataType::Float16 => f16::EPSILON.to_f64(),
        DataType::Bfloat16 => bf16::EPSILON.to_f64(),
        DataType::Float8E4M3 => 0.125,
        DataType::Float8E5M2 => 0.25,
        _ => 0.0,
    }
}

/// The smallest subnormal step of a float datatype.
fn tiny(dtype: DataType) -> f64 {
    match dtype {
        DataType::Float16 => 2f64.powi(-24),
        DataType::Bfloat16 => 2f64.powi(-133),
        DataType::Float8E4M3 => 2f64.powi(-9),
        DataType::Float8E5M2 => 2f64.powi(-16),
        _ => 0.0,
    }
}

/// `x` rounded to the datatype.
fn round(dtype: DataType, x: f64) -> f64 {
    decode(dtype, &encode(dtype, x))
}

/// One element of `dtype` holding `x` (integers wrap modulo 2^bits; floats round to nearest).
pub fn encode(dtype: DataType, x: f64) -> Vec<u8> {
    let i = x as i128 as i64;
    match dtype {
        DataType::Int8 => (i as i8).to_ne_bytes().to_vec(),
        DataType::Uint8 => (i as u8).to_ne_bytes().to_vec(),
        DataType::Int32 => (i as i32).to_ne_bytes().to_vec(),
        DataType::Uint32 => (i as u32).to_ne_bytes().to_vec(),
        DataType::Int64 => i.to_ne_bytes().to_vec(),
        DataType::Uint64 => (i as u64).to_ne_bytes().to_vec(),
        DataType::Float16 => f16::from_f64(x).to_ne_bytes().to_vec(),
        DataType::Bfloat16 => bf16::from_f64(x).to_ne_bytes().to_vec(),
        DataType::Float32 => (x as f32).to_ne_bytes().to_vec(),
        DataType::Float64 => x.to_ne_bytes().to_vec(),
        DataType::Float8E4M3 => vec![Format::E4M3.encode_f64(x)],
        DataType::Float8E5M2 => vec![Format::E5M2.encode_f64(x)],
    }
}

/// The value of one element.
pub fn decode(dtype: DataType, b: &[u8]) -> f64 {
    match dtype {
        DataType::Int8 => i8::from_ne_bytes([b[0]]) as f64,
        DataType::Uint8 => b[0] as f64,
        DataType::Int32 => i32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Uint32 => u32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Int64 => i64::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Uint64 => u64::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Float16 => f16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DataType::Bfloat16 => bf16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DataType::Float32 => f32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Float64 => f64::from_ne_bytes(b.try_into().unwrap()),
        DataType::Float8E4M3 => Format::E4M3.decode(b[0]) as f64,
        DataType::Float8E5M2 => Format::E5M2.decode(b[0]) as f64,
    }
}

/// Runs one case on a GPU communicator: the checker's host buffers are copied into `send`
/// and `recv` (device buffers large enough for the case, laid out the same way), the
/// collective runs on `stream`, and the buffers come back to be checked.
pub fn run_case_on_gpu(comm: &Communicator, stream: &Stream, send: &DeviceBuffer, recv: &DeviceBuffer, case: &Case) -> Result<Option<Mismatch>> {
    run_case_with(case, comm.rank(), comm.nranks(), on_gpu(comm, stream, send, recv, case))
}

/// The `run` of [`run_case_with`] that runs `case` on `comm`'s GPU through `send` and
/// `recv` (see [`run_case_on_gpu`]).
fn on_gpu<'a>(
    comm: &'a Communicator,
    stream: &'a Stream,
    send: &'a DeviceBuffer,
    recv: &'a DeviceBuffer,
    case: &'a Case,
) -> impl FnOnce(&mut [u8], &mut [u8], Placement, ReduceOp) -> Result<()> + 'a {
    move |host_send, host_recv, placement, op| {
        send.upload(host_send)?;
        recv.upload(host_recv)?;
        let (s, r) = match placement {
            Placement::Separate => (send.ptr(), recv.ptr()),
            Placement::OutputInInput { recv_offset } => (send.ptr(), send.ptr() + recv_offset as u64),
            Placement::InputInOutput { send_offset } => (recv.ptr() + send_offset as u64, recv.ptr()),
        };
        // SAFETY: both addresses lie in device buffers the caller sized for this case and
        // touches nothing else in until the stream is synchronized below.
        unsafe { comm.launch_collective(case.collective, s, r, case.count, case.dtype, op, case.root, stream.raw())? };
        comm.wait(stream)?;
        send.download(host_send)?;
        recv.download(host_recv)
    }
}
