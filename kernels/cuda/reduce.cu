// Elementwise reductions of oxccl's datatypes and ops on the GPU: the arithmetic of every
// reducing step of the CUDA executor. Compiled by NVRTC (kernels/src/cuda.rs), specialised
// per (datatype, op) with
//   -DOX_DTYPE=<ncclDataType_t value>   0 int8, 1 uint8, 2 int32, 3 uint32, 4 int64,
//                                        5 uint64, 6 half, 7 float, 8 double, 9 bfloat16,
//                                        10 f8e4m3, 11 f8e5m2
//   -DOX_OP=<combine>                    0 sum, 1 prod, 2 max, 3 min
// The semantics are the CPU kernels' (oxccl-kernels, "Semantics"), which the GPU results
// are checked against bit for bit:
//   - integers wrap (computed in the unsigned type: no signed-overflow UB);
//   - max/min: a number beats NaN (fmaxf/fminf), and -0 < +0;
//   - half, bfloat16 and fp8 widen to float, combine once, round to nearest even back
//     (fp8 saturates to the largest finite value, NaN stays NaN).

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#ifndef OX_DTYPE
#error "OX_DTYPE must be defined"
#endif
#ifndef OX_OP
#error "OX_OP must be defined"
#endif

typedef unsigned long long u64;

// Integer kinds: the storage type T and the unsigned type U the arithmetic wraps in.
#if OX_DTYPE == 0
typedef signed char T; typedef unsigned char U;
#define OX_INT 1
#define OX_SIGNED 1
#elif OX_DTYPE == 1
typedef unsigned char T; typedef unsigned char U;
#define OX_INT 1
#define OX_SIGNED 0
#elif OX_DTYPE == 2
typedef int T; typedef unsigned int U;
#define OX_INT 1
#define OX_SIGNED 1
#elif OX_DTYPE == 3
typedef unsigned int T; typedef unsigned int U;
#define OX_INT 1
#define OX_SIGNED 0
#elif OX_DTYPE == 4
typedef long long T; typedef unsigned long long U;
#define OX_INT 1
#define OX_SIGNED 1
#elif OX_DTYPE == 5
typedef unsigned long long T; typedef unsigned long long U;
#define OX_INT 1
#define OX_SIGNED 0
#elif OX_DTYPE == 6
typedef __half T;
#define OX_INT 0
#elif OX_DTYPE == 7
typedef float T;
#define OX_INT 0
#elif OX_DTYPE == 8
typedef double T;
#define OX_INT 0
#elif OX_DTYPE == 9
typedef __nv_bfloat16 T;
#define OX_INT 0
#elif OX_DTYPE == 10
typedef __nv_fp8_storage_t T;
#define OX_INT 0
#elif OX_DTYPE == 11
typedef __nv_fp8_storage_t T;
#define OX_INT 0
#else
#error "unknown OX_DTYPE"
#endif

#if OX_INT

__device__ __forceinline__ T ox_combine(T a, T b) {
#if OX_OP == 0
  return (T)((U)a + (U)b);
#elif OX_OP == 1
  return (T)((U)a * (U)b);
#elif OX_OP == 2
  return a > b ? a : b;
#else
  return a < b ? a : b;
#endif
}

#else

// The arithmetic type of a float kind (double for double, float for the rest).
#if OX_DTYPE == 8
typedef double A;
#else
typedef float A;
#endif

__device__ __forceinline__ A ox_widen(T x) {
#if OX_DTYPE == 6
  return __half2float(x);
#elif OX_DTYPE == 9
  return __bfloat162float(x);
#elif OX_DTYPE == 10
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
#elif OX_DTYPE == 11
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E5M2)));
#else
  return x;
#endif
}

__device__ __forceinline__ T ox_narrow(A x) {
#if OX_DTYPE == 6
  return __float2half_rn(x);
#elif OX_DTYPE == 9
  return __float2bfloat16_rn(x);
#elif OX_DTYPE == 10
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
#elif OX_DTYPE == 11
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
#else
  return x;
#endif
}

// max/min of two values: a number beats NaN; -0 < +0.
__device__ __forceinline__ A ox_pick(A a, A b, bool want_max) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == b) {
    // Equal: only signed zeros can differ; max takes +0, min takes -0.
    bool a_neg = signbit(a);
    return (a_neg == want_max) ? b : a;
  }
  return ((a > b) == want_max) ? a : b;
}

__device__ __forceinline__ T ox_combine(T a, T b) {
  A x = ox_widen(a), y = ox_widen(b);
#if OX_OP == 0
  A r = x + y;
#elif OX_OP == 1
  A r = x * y;
#elif OX_OP == 2
  A r = ox_pick(x, y, true);
#else
  A r = ox_pick(x, y, false);
#endif
  return ox_narrow(r);
}

#endif

// dst[i] = a[i] (op) b[i] for i < n; dst may be a or b (in place).
extern "C" __global__ void ox_combine_into(T* dst, const T* a, const T* b, u64 n) {
  u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = ox_combine(a[i], b[i]);
  }
}
