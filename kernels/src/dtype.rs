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

    /// From an `ncclDataType_t` value (the aliases ncclChar, ncclInt, ncclHalf, ncclFloat and
    /// ncclDouble share their values with Int8, Int32, Float16, Float32 and Float64).
    pub fn from_nccl(value: i32) -> Result<DataType> {
        usize::try_from(value).ok().and_then(|i| DataType::ALL.get(i).copied()).ok_or(Error::BadDataType { value })
    }

    /// The `ncclDataType_t` value.
    pub fn to_nccl(self) -> i32 {
        self as i32
    }

    /// The name nccl-tests prints in its `type` column and accepts after `-d`: `int8`, `uint8`,
    /// `int32`, `uint32`, `int64`, `uint64`, `half`, `float`, `double`, `bfloat16`, `f8e4m3`,
    /// `f8e5m2`.
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

    /// Whether the type is a signed integer.
    pub fn is_signed_integer(self) -> bool {
        matches!(self, DataType::Int8 | DataType::Int32 | DataType::Int64)
    }

    /// Whether the type is floating point.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Bfloat16 | DataType::Float8E4M3 | DataType::Float8E5M2
        )
    }

    /// The number of elements in `bytes` bytes, or an error if that is not a whole number.
    pub fn check_len(self, bytes: usize) -> Result<usize> {
        if bytes % self.size() != 0 {
            return Err(Error::NotWholeElements { bytes, dtype: self });
        }
        Ok(bytes / self.size())
    }
}

impl TryFrom<i32> for DataType {
    type Error = Error;

    fn try_from(value: i32) -> Result<DataType> {
        DataType::from_nccl(value)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_sizes_and_names_follow_nccl() {
        let names = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"];
        let sizes = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for (i, dtype) in DataType::ALL.into_iter().enumerate() {
            assert_eq!(dtype.to_nccl(), i as i32);
            assert_eq!(DataType::from_nccl(i as i32), Ok(dtype));
            assert_eq!(dtype.size(), sizes[i]);
            assert_eq!(dtype.name(), names[i]);
            assert_eq!(DataType::parse(names[i]), Some(dtype));
            assert_eq!(dtype.is_float(), i >= 6, "{dtype}");
        }
        for value in [-1, 12, i32::MIN, i32::MAX] {
            assert_eq!(DataType::from_nccl(value), Err(Error::BadDataType { value }));
        }
        assert_eq!(DataType::parse("float32"), Some(DataType::Float32));
        assert_eq!(DataType::parse("BF16"), Some(DataType::Bfloat16));
        assert_eq!(DataType::parse("int128"), None);
    }

    #[test]
    fn lengths_must_be_whole_elements() {
        assert_eq!(DataType::Float64.check_len(24), Ok(3));
        assert_eq!(DataType::Float64.check_len(0), Ok(0));
        let err = DataType::Float64.check_len(20).unwrap_err();
        assert_eq!(err, Error::NotWholeElements { bytes: 20, dtype: DataType::Float64 });
        assert!(err.to_string().contains("20 bytes") && err.to_string().contains("double"), "{err}");
    }
}
