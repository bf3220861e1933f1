//! Rust element types and the datatypes they stand for.

pub use oxccl_kernels::{DataType, ReduceOp, E4M3, E5M2};

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
    E4M3 => Float8E4M3, E5M2 => Float8E5M2,
}
