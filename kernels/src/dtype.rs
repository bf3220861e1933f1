//! Datatypes, with the values of `ncclDataType_t`.

use std::fmt;

use crate::{Error, Result};

/// An element type. The discriminants are `ncclDataType_t`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
    Float8E4M3 = 10,
    Float8E5M2 = 11,
}

impl DataType {
    /// Every datatype, in `ncclDataType_t` order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// From an `ncclDataType_t` value.
    pub fn from_nccl(value: i32) -> Result<DataType> {
        usize::try_from(value).ok().and_then(|i| DataType::ALL.get(i).copied()).ok_or(Error::BadDataType(value))
    }

    /// The name nccl-tests prints (`-d` accepts it too).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8E4M3 => "f8e4m3",
            DataType::Float8E5M2 => "f8e5m2",
        }
    }

    /// Parses [`DataType::name`] and common aliases (`f32`, `float32`, `i8`, ...).
    pub fn parse(s: &str) -> Option<DataType> {
        let s = s.to_ascii_lowercase();
        DataType::ALL.iter().copied().find(|d| d.name() == s).or(match s.as_str() {
            "i8" | "char" => Some(DataType::Int8),
            "u8" => Some(DataType::Uint8),
            "i32" | "int" => Some(DataType::Int32),
            "u32" => Some(DataType::Uint32),
            "i64" => Some(DataType::Int64),
            "u64" => Some(DataType::Uint64),
            "f16" | "float16" | "fp16" => Some(DataType::Float16),
            "f32" | "float32" | "fp32" => Some(DataType::Float32),
            "f64" | "float64" | "fp64" => Some(DataType::Float64),
            "bf16" => Some(DataType::Bfloat16),
            "fp8e4m3" | "e4m3" | "float8e4m3" => Some(DataType::Float8E4M3),
            "fp8e5m2" | "e5m2" | "float8e5m2" => Some(DataType::Float8E5M2),
            _ => None,
        })
    }

    /// Whether the type is floating point.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Bfloat16 | DataType::Float8E4M3 | DataType::Float8E5M2
        )
    }

    /// Checks that `len` bytes are whole elements.
    pub fn check_len(self, len: usize) -> Result<usize> {
        if len % self.size() != 0 {
            return Err(Error::Ragged { len, dtype: self });
        }
        Ok(len / self.size())
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
