//! PreMulSum's multiplier.

use crate::element::{dispatch, Element};
use crate::{DataType, Error, Result};

/// The multiplier of a PreMulSum, held either as a number or as one element of a datatype.
///
/// - [`Scalar::Raw`] is what `ncclRedOpCreatePreMulSum` receives: the bytes of one element of
///   the reduction's datatype, in native byte order. It is used exactly, and a plan refuses it
///   for any other datatype (NCCL does the same).
/// - [`Scalar::F64`] is a convenience for Rust callers. It is converted to the reduction's
///   datatype when a plan is built: floats round to nearest even through f32 (as NCCL rounds its
///   Avg scalar, `float(1.0/n)`, before converting it to half, bfloat16 or fp8; fp8 saturates);
///   integers truncate toward zero and wrap modulo 2^bits, so `F64(-1.0)` on `uint8` is 255.
///   Integers beyond 2^53 are not exact in an f64: use `Raw` for those.
///
/// Each rank multiplies its own input by its own scalar; ranks may pass different scalars
/// (nccl-tests does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A number, converted to the reduction's datatype.
    F64(f64),
    /// One element of `dtype`: `bytes[..dtype.size()]` in native byte order, the rest zero.
    Raw { dtype: DataType, bytes: [u8; 8] },
}

impl Scalar {
    /// One element of `dtype` from its bytes (native byte order), as a C caller passes it.
    pub fn from_bytes(dtype: DataType, element: &[u8]) -> Result<Scalar> {
        if element.len() != dtype.size() {
            return Err(Error::ScalarSize { dtype, bytes: element.len() });
        }
        let mut bytes = [0u8; 8];
        bytes[..element.len()].copy_from_slice(element);
        Ok(Scalar::Raw { dtype, bytes })
    }

    /// The datatype of a `Raw` scalar; `None` for `F64`.
    pub fn dtype(&self) -> Option<DataType> {
        match self {
            Scalar::F64(_) => None,
            Scalar::Raw { dtype, .. } => Some(*dtype),
        }
    }

    /// The scalar as one element of `dtype`: `F64` is converted (see the type's docs), `Raw`
    /// must already be of `dtype`.
    pub fn to_element(self, dtype: DataType) -> Result<Scalar> {
        match self {
            Scalar::Raw { dtype: own, .. } if own == dtype => Ok(self),
            Scalar::Raw { dtype: own, .. } => Err(Error::ScalarMismatch { scalar: own, reduction: dtype }),
            Scalar::F64(x) => {
                let mut bytes = [0u8; 8];
                dispatch!(dtype, T => bytes[..dtype.size()].copy_from_slice(bytemuck::bytes_of(&T::from_f64(x))));
                Ok(Scalar::Raw { dtype, bytes })
            }
        }
    }

    /// The bytes of the element, for `Raw` (`dtype.size()` of them); `None` for `F64`.
    pub fn element_bytes(&self) -> Option<&[u8]> {
        match self {
            Scalar::F64(_) => None,
            Scalar::Raw { dtype, bytes } => Some(&bytes[..dtype.size()]),
        }
    }

    /// The value as an f64 (exact for floats and for integers up to 2^53).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::F64(x) => x,
            Scalar::Raw { dtype, bytes } => dispatch!(dtype, T => bytemuck::pod_read_unaligned::<T>(&bytes[..dtype.size()]).to_f64()),
        }
    }

    /// The element as `T`, which the caller has matched to the scalar's datatype.
    pub(crate) fn typed<T: Element>(self, dtype: DataType) -> Result<T> {
        let Scalar::Raw { bytes, .. } = self.to_element(dtype)? else {
            unreachable!("to_element always returns Raw");
        };
        Ok(bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<T>()]))
    }
}

impl From<f64> for Scalar {
    fn from(x: f64) -> Scalar {
        Scalar::F64(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_scalars_convert_like_nccl() {
        let element = |dtype, x: f64| Scalar::F64(x).to_element(dtype).unwrap().element_bytes().unwrap().to_vec();
        assert_eq!(element(DataType::Uint8, -1.0), vec![255]);
        assert_eq!(element(DataType::Int8, -2.9), vec![(-2i8) as u8]);
        assert_eq!(element(DataType::Int32, 1e10), (1e10 as i64 as i32).to_ne_bytes().to_vec());
        assert_eq!(element(DataType::Float32, 0.1), 0.1f32.to_ne_bytes().to_vec());
        assert_eq!(element(DataType::Float16, 1.0 / 3.0), half::f16::from_f32(1.0 / 3.0).to_ne_bytes().to_vec());
        assert_eq!(element(DataType::Float8E4M3, 1.0 / 3.0), vec![0x2b]); // 0.34375, nearest to 1/3
        assert_eq!(element(DataType::Float8E4M3, 1e6), vec![0x7e]); // saturates
        assert_eq!(Scalar::F64(2.5).to_f64(), 2.5);
    }

    #[test]
    fn raw_scalars_are_exact_and_typed() {
        let big = Scalar::from_bytes(DataType::Uint64, &u64::MAX.to_ne_bytes()).unwrap();
        assert_eq!(big.dtype(), Some(DataType::Uint64));
        assert_eq!(big.typed::<u64>(DataType::Uint64), Ok(u64::MAX));
        assert_eq!(big.to_element(DataType::Int64), Err(Error::ScalarMismatch { scalar: DataType::Uint64, reduction: DataType::Int64 }));
        assert_eq!(Scalar::from_bytes(DataType::Float32, &[0; 2]), Err(Error::ScalarSize { dtype: DataType::Float32, bytes: 2 }));
        let half = Scalar::from_bytes(DataType::Bfloat16, &half::bf16::from_f32(-1.5).to_ne_bytes()).unwrap();
        assert_eq!(half.to_f64(), -1.5);
        assert_eq!(half.element_bytes().unwrap().len(), 2);
    }
}
