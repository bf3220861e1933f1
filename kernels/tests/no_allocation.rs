//! The kernels never allocate: every entry point, every datatype, aligned and misaligned.
//!
//! A counting global allocator (the only unsafe code of this crate's tests: implementing
//! `GlobalAlloc` requires it) counts allocations made by the current thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use oxccl_kernels::{
    combine, combine_into, finalize_avg, premultiply, premultiply_in_place, reduce_in_place, reduce_into, Combine, DataType, ReduceOp,
    ReducePlan, Scalar,
};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counter is a const-initialised thread-local Cell, which does
// not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (the caller's contract).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn no_entry_point_allocates() {
    let bytes = 8 * 1024 + 8;
    let mut a = vec![0x3cu8; bytes];
    let b = vec![0x3du8; bytes];
    let mut out = vec![0u8; bytes];
    let plans: Vec<(DataType, ReducePlan)> = DataType::ALL
        .into_iter()
        .flat_map(|dtype| ReduceOp::ALL.into_iter().map(move |op| (dtype, ReducePlan::new(op, dtype, 3).unwrap())))
        .collect();
    // The counter works.
    let before = allocations();
    drop(std::hint::black_box(vec![1u8; 3]));
    assert_eq!(allocations(), before + 1);
    let before = allocations();
    for &(dtype, plan) in &plans {
        for offset in [0, 1] {
            let len = 8 * 1024;
            let (a, b, out) = (&mut a[offset..][..len], &b[offset..][..len], &mut out[offset..][..len]);
            plan.prepare_input(out, b).unwrap();
            plan.prepare_in_place(a).unwrap();
            reduce_in_place(dtype, &plan, a, b).unwrap();
            reduce_into(dtype, &plan, out, a, b).unwrap();
            plan.finalize(a).unwrap();
            combine(dtype, Combine::Max, a, b).unwrap();
            combine_into(dtype, Combine::Prod, out, a, b).unwrap();
            premultiply(dtype, Scalar::F64(0.5), out, a).unwrap();
            premultiply_in_place(dtype, Scalar::F64(0.5), a).unwrap();
            finalize_avg(dtype, 7, a).unwrap();
        }
    }
    assert_eq!(allocations() - before, 0, "the kernels allocated");
}
