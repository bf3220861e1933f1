//! The kernels: elementwise reduce, premultiply and divide on byte buffers, for every datatype.
//!
//! Buffers are viewed as typed slices when their addresses are aligned for the element type
//! (the normal case: user allocations and FIFO slots), and reduced in plain slice loops that
//! the compiler vectorizes for f32, f64 and the integers. Misaligned buffers take an
//! element-at-a-time path that reads and writes unaligned, with the same results. Nothing
//! allocates.

use crate::element::{dispatch, Element};
use crate::plan::{Combine, ReducePlan};
use crate::{DataType, Error, Result, Scalar};

/// `dst[i] = dst[i] (op) src[i]`: step 2 of a [`ReducePlan`].
///
/// `dtype` must be the plan's (the check guards against a plan built for another datatype).
pub fn reduce_in_place(dtype: DataType, plan: &ReducePlan, dst: &mut [u8], src: &[u8]) -> Result<()> {
    check_plan(dtype, plan)?;
    combine(dtype, plan.combine(), dst, src)
}

/// `dst[i] = a[i] (op) b[i]`: step 2 of a [`ReducePlan`], out of place.
pub fn reduce_into(dtype: DataType, plan: &ReducePlan, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<()> {
    check_plan(dtype, plan)?;
    combine_into(dtype, plan.combine(), dst, a, b)
}

/// `acc[i] = acc[i] (op) src[i]` with a bare [`Combine`] (no plan).
pub fn combine(dtype: DataType, op: Combine, acc: &mut [u8], src: &[u8]) -> Result<()> {
    check_pair(dtype, acc.len(), src.len())?;
    dispatch!(dtype, T => combine_typed::<T>(op, acc, src));
    Ok(())
}

/// `dst[i] = a[i] (op) b[i]` with a bare [`Combine`] (no plan).
pub fn combine_into(dtype: DataType, op: Combine, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<()> {
    check_pair(dtype, dst.len(), a.len())?;
    check_pair(dtype, dst.len(), b.len())?;
    dispatch!(dtype, T => combine_into_typed::<T>(op, dst, a, b));
    Ok(())
}

/// `dst[i] = src[i] * scalar`, in the datatype's arithmetic (integers wrap; f16, bf16 and fp8
/// multiply in f32 and round once): step 1 of PreMulSum and float Avg.
pub fn premultiply(dtype: DataType, scalar: Scalar, dst: &mut [u8], src: &[u8]) -> Result<()> {
    check_pair(dtype, dst.len(), src.len())?;
    dispatch!(dtype, T => {
        scale_typed::<T>(dst, src, scalar.typed(dtype)?);
    });
    Ok(())
}

/// `buf[i] = buf[i] * scalar`, as [`premultiply`] in place.
pub fn premultiply_in_place(dtype: DataType, scalar: Scalar, buf: &mut [u8]) -> Result<()> {
    dtype.check_len(buf.len())?;
    dispatch!(dtype, T => {
        scale_in_place_typed::<T>(buf, scalar.typed(dtype)?);
    });
    Ok(())
}

/// `buf[i] = buf[i] / nranks`: step 3 of integer Avg.
///
/// Integers divide truncating toward zero, keeping the sign (NCCL's `FuncSumPostDiv`:
/// -7 / 2 = -3). Float types divide too (x / n rounded once), though a plan never asks for it:
/// NCCL averages floats by premultiplying each input by 1/n instead.
pub fn finalize_avg(dtype: DataType, nranks: usize, buf: &mut [u8]) -> Result<()> {
    dtype.check_len(buf.len())?;
    if nranks == 0 {
        return Err(Error::NoRanks);
    }
    let n = nranks as u64;
    dispatch!(dtype, T => divide_typed::<T>(buf, n));
    Ok(())
}


fn check_plan(dtype: DataType, plan: &ReducePlan) -> Result<()> {
    if plan.dtype() != dtype {
        return Err(Error::PlanMismatch { plan: plan.dtype(), given: dtype });
    }
    Ok(())
}

/// Both buffers hold the same number of whole elements.
pub(crate) fn check_pair(dtype: DataType, dst: usize, src: usize) -> Result<()> {
    if dst != src {
        return Err(Error::LengthMismatch { dst, src });
    }
    dtype.check_len(dst).map(drop)
}

fn combine_typed<T: Element>(op: Combine, acc: &mut [u8], src: &[u8]) {
    if let (Ok(acc), Ok(src)) = (bytemuck::try_cast_slice_mut::<u8, T>(acc), bytemuck::try_cast_slice::<u8, T>(src)) {
        return T::zip_in_place(op, acc, src);
    }
    let f = element_op::<T>(op);
    let size = std::mem::size_of::<T>();
    for (a, b) in acc.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
        let v = f(bytemuck::pod_read_unaligned(a), bytemuck::pod_read_unaligned(b));
        a.copy_from_slice(bytemuck::bytes_of(&v));
    }
}

fn combine_into_typed<T: Element>(op: Combine, dst: &mut [u8], a: &[u8], b: &[u8]) {
    let typed = (bytemuck::try_cast_slice_mut::<u8, T>(dst), bytemuck::try_cast_slice::<u8, T>(a), bytemuck::try_cast_slice::<u8, T>(b));
    if let (Ok(dst), Ok(a), Ok(b)) = typed {
        return T::zip_into(op, dst, a, b);
    }
    let f = element_op::<T>(op);
    let size = std::mem::size_of::<T>();
    for (d, (x, y)) in dst.chunks_exact_mut(size).zip(a.chunks_exact(size).zip(b.chunks_exact(size))) {
        let v = f(bytemuck::pod_read_unaligned(x), bytemuck::pod_read_unaligned(y));
        d.copy_from_slice(bytemuck::bytes_of(&v));
    }
}

fn scale_typed<T: Element>(dst: &mut [u8], src: &[u8], s: T) {
    if let (Ok(dst), Ok(src)) = (bytemuck::try_cast_slice_mut::<u8, T>(dst), bytemuck::try_cast_slice::<u8, T>(src)) {
        return T::scale_into(dst, src, s);
    }
    let size = std::mem::size_of::<T>();
    for (d, x) in dst.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
        d.copy_from_slice(bytemuck::bytes_of(&bytemuck::pod_read_unaligned::<T>(x).mul(s)));
    }
}

fn scale_in_place_typed<T: Element>(buf: &mut [u8], s: T) {
    if let Ok(buf) = bytemuck::try_cast_slice_mut::<u8, T>(buf) {
        return T::scale_in_place(buf, s);
    }
    map_in_place_unaligned::<T>(buf, |x| x.mul(s));
}

fn divide_typed<T: Element>(buf: &mut [u8], n: u64) {
    if let Ok(buf) = bytemuck::try_cast_slice_mut::<u8, T>(buf) {
        for x in buf.iter_mut() {
            *x = x.divide(n);
        }
        return;
    }
    map_in_place_unaligned::<T>(buf, |x| x.divide(n));
}

/// The element-at-a-time form of an op, for misaligned buffers.
fn element_op<T: Element>(op: Combine) -> fn(T, T) -> T {
    match op {
        Combine::Sum => T::add,
        Combine::Prod => T::mul,
        Combine::Max => T::max,
        Combine::Min => T::min,
    }
}

fn map_in_place_unaligned<T: Element>(buf: &mut [u8], f: impl Fn(T) -> T) {
    let size = std::mem::size_of::<T>();
    for x in buf.chunks_exact_mut(size) {
        let v = f(bytemuck::pod_read_unaligned(x));
        x.copy_from_slice(bytemuck::bytes_of(&v));
    }
}
