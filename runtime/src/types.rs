//! Rust element types and the datatypes they stand for.

pub use oxccl_kernels::{DataType, ReduceOp};

/// A Rust type a collective can carry: plain data with a fixed datatype.
pub trait Element: bytemuck::Pod + Send + Sync {
    const DATATYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DATATYPE: DataType = DataType::$d;
        }
    )*};
}

element! {
    i8 => Int8, u8 => Uint8, i32 => Int32, u32 => Uint32, i64 => Int64, u64 => Uint64,
    half::f16 => Float16, f32 => Float32, f64 => Float64, half::bf16 => Bfloat16,
    Fp8E4M3 => Float8E4M3, Fp8E5M2 => Float8E5M2,
}

/// An fp8 E4M3 value (raw bits); convert with [`oxccl_kernels::fp8::Format`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Fp8E4M3(pub u8);

/// An fp8 E5M2 value (raw bits); convert with [`oxccl_kernels::fp8::Format`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Fp8E5M2(pub u8);
