// The CUDA executor: runs a rank's lanes of schedule steps, the same steps the host
// executor runs (oxccl_runtime::algo), over FIFO connections in GPU memory (the Simple
// protocol: a slot of data, then a flag). Compiled after reduce.cu (which gives T and
// ox_combine) and after the header generated from the Rust layouts (OxStep, OxConn, OxArgs,
// the step kinds; oxccl_kernels::device::header).
//
// One thread block per lane. For each step, thread 0 waits until the incoming message has
// arrived (the connection's tail passed this end's count) and the outgoing slot is free
// (the receiver's head is within `slots` of it); all threads then move the data — loads
// through L2 (ld.global.cg: slots are rewritten by peers, so L1 may hold stale lines),
// 16 bytes at a time when every pointer allows it; a barrier, a system-scope fence, and
// thread 0 publishes: the new tail to the receiver, the new head to the sender. Every wait
// watches the abort flag (mapped host memory) and the launch's timeout.

typedef unsigned int u32;

#ifndef OX_THREADS
#define OX_THREADS 512
#endif
#ifndef OX_UNROLL
#define OX_UNROLL 4
#endif

__device__ __forceinline__ u64 ox_now() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits until *word >= target: 0, or OX_ABORTED / OX_TIMED_OUT.
__device__ int ox_wait(volatile u64* word, u64 target, const OxArgs& a) {
  if (*word >= target) return 0;
  const u64 start = ox_now();
  u32 spins = 0;
  while (*word < target) {
    if (++spins % 512 == 0) {
      if (*a.abort) return OX_ABORTED;
      if (ox_now() - start > a.timeout_ns) return OX_TIMED_OUT;
    }
  }
  return 0;
}

template <int S> struct OxBits;
template <> struct OxBits<1> { typedef unsigned char t; };
template <> struct OxBits<2> { typedef unsigned short t; };
template <> struct OxBits<4> { typedef unsigned int t; };
template <> struct OxBits<8> { typedef unsigned long long t; };
typedef OxBits<sizeof(T)>::t Bits;

__device__ __forceinline__ T ox_load(const char* p) {
  Bits b = __ldcg((const Bits*)p);
  T x;
  memcpy(&x, &b, sizeof(T));
  return x;
}

__device__ __forceinline__ void ox_store(char* p, T x) {
  Bits b;
  memcpy(&b, &x, sizeof(T));
  *(Bits*)p = b;
}

// x times the launch's scalar, in the datatype's arithmetic (PreMulSum, float Avg).
__device__ __forceinline__ T ox_scale(T x, double s) {
#if OX_INT
  return (T)((U)x * (U)(long long)s);
#elif OX_DTYPE == 8
  return x * s;
#else
  // The scalar is rounded to the datatype first, as the CPU kernels and NCCL do.
  return ox_narrow(ox_widen(x) * ox_widen(ox_narrow((A)s)));
#endif
}

#define OX_EACH (16 / sizeof(T))

__device__ __forceinline__ uint4 ox_scale_pack(uint4 v, double s) {
  T e[OX_EACH];
  memcpy(e, &v, 16);
#pragma unroll
  for (int i = 0; i < (int)OX_EACH; ++i) e[i] = ox_scale(e[i], s);
  memcpy(&v, e, 16);
  return v;
}

__device__ __forceinline__ uint4 ox_combine_pack(uint4 x, uint4 y) {
  T a[OX_EACH], b[OX_EACH];
  memcpy(a, &x, 16);
  memcpy(b, &y, 16);
#pragma unroll
  for (int i = 0; i < (int)OX_EACH; ++i) a[i] = ox_combine(a[i], b[i]);
  memcpy(&x, a, 16);
  return x;
}

__device__ __forceinline__ bool ox_aligned(const void* p) { return ((u64)p & 15) == 0; }

// d0 (and d1 when not null) = in (op) local, or in, or local; `local` scaled when `scale`.
// `in` and `local` are never both null. Every pointer is aligned to sizeof(T); `bytes` is a
// whole number of elements.
__device__ void ox_move(char* d0, char* d1, const char* in, const char* local, u32 bytes, bool scale, double s) {
  const u32 tid = threadIdx.x;
  const bool reduce = in && local;
  const bool elementwise = reduce || scale;
  u32 done = 0;
  if (ox_aligned(d0) && (!d1 || ox_aligned(d1)) && (!in || ox_aligned(in)) && (!local || ox_aligned(local))) {
    const u32 packs = bytes / 16;
    const uint4* a = (const uint4*)in;
    const uint4* b = (const uint4*)local;
    uint4* x = (uint4*)d0;
    uint4* y = (uint4*)d1;
    u32 i = tid;
    // OX_UNROLL packs per thread per round, all loads issued before any store: enough
    // bytes in flight per SM to keep NVLink and HBM busy.
    for (; i + (OX_UNROLL - 1) * OX_THREADS < packs; i += OX_UNROLL * OX_THREADS) {
      uint4 v[OX_UNROLL], w[OX_UNROLL];
#pragma unroll
      for (int u = 0; u < OX_UNROLL; ++u) {
        if (a) v[u] = __ldcg(a + i + u * OX_THREADS);
        if (b) w[u] = __ldcg(b + i + u * OX_THREADS);
      }
#pragma unroll
      for (int u = 0; u < OX_UNROLL; ++u) {
        if (b) {
          if (scale) w[u] = ox_scale_pack(w[u], s);
          v[u] = a ? ox_combine_pack(v[u], w[u]) : w[u];
        }
        x[i + u * OX_THREADS] = v[u];
        if (y) y[i + u * OX_THREADS] = v[u];
      }
    }
    for (; i < packs; i += OX_THREADS) {
      uint4 v;
      if (a) v = __ldcg(a + i);
      if (b) {
        uint4 w = __ldcg(b + i);
        if (scale) w = ox_scale_pack(w, s);
        v = a ? ox_combine_pack(v, w) : w;
      }
      x[i] = v;
      if (y) y[i] = v;
    }
    done = packs * 16;
  }
  if (!elementwise) {
    for (u32 i = done + tid; i < bytes; i += OX_THREADS) {
      char v = in ? __ldcg(in + i) : __ldcg(local + i);
      d0[i] = v;
      if (d1) d1[i] = v;
    }
    return;
  }
  for (u32 i = done + tid * sizeof(T); i < bytes; i += OX_THREADS * sizeof(T)) {
    T v;
    if (in) v = ox_load(in + i);
    if (local) {
      T w = ox_load(local + i);
      if (scale) w = ox_scale(w, s);
      v = in ? ox_combine(v, w) : w;
    }
    ox_store(d0 + i, v);
    if (d1) ox_store(d1 + i, v);
  }
}

// Reports why a lane stopped (plain stores: atomics on mapped host memory are not
// available everywhere; lanes racing here all report the same kind of failure).
__device__ void ox_fail(const OxArgs& a, int why, u32 lane, u32 step) {
  volatile int* status = a.status;
  status[1] = (int)lane;
  status[2] = (int)step;
  __threadfence_system();
  status[0] = why;
}

extern "C" __global__ void __launch_bounds__(OX_THREADS) ox_run(const OxArgs a) {
  __shared__ const char* s_in;
  __shared__ char* s_out;
  __shared__ int s_stop;
  const u32 lane = blockIdx.x;
  const u32 first = a.bounds[lane], end = a.bounds[lane + 1];
  for (u32 i = first; i < end; ++i) {
    const OxStep s = a.steps[i];
    if (threadIdx.x == 0) {
      int why = 0;
      const char* in = 0;
      char* out = 0;
      if (s.recv != OX_NO_CONN) {
        const OxConn& c = a.conns[s.recv];
        const u64 n = *c.counter;
        why = ox_wait(c.tail, n + 1, a);
        in = c.slots_base + (n % c.slots) * c.slot_bytes;
      }
      if (!why && s.send != OX_NO_CONN) {
        const OxConn& c = a.conns[s.send];
        const u64 n = *c.counter;
        // Slot n % slots is free once the receiver consumed message n - slots.
        why = n + 1 > c.slots ? ox_wait(c.head, n + 1 - c.slots, a) : 0;
        out = c.slots_base + (n % c.slots) * c.slot_bytes;
      }
      if (why) ox_fail(a, why, lane, i - first);
      __threadfence();
      s_in = in;
      s_out = out;
      s_stop = why;
    }
    __syncthreads();
    if (s_stop) return;
    const bool reads = s.kind == OX_SEND || s.kind == OX_RECV_REDUCE_SEND || s.kind == OX_RECV_REDUCE_COPY || s.kind == OX_RECV_REDUCE_COPY_SEND || s.kind == OX_COPY;
    const bool writes = s.kind != OX_SEND && s.kind != OX_RECV_REDUCE_SEND;
    const bool from_input = reads && !(s.src & OX_RECV_BUFFER);
    const char* local = !reads ? 0 : from_input ? a.send + s.src : a.recv + (s.src & ~OX_RECV_BUFFER);
    char* dst = writes ? a.recv + (s.dst & ~OX_RECV_BUFFER) : 0;
    const bool scale = a.scaled && from_input;
    switch (s.kind) {
      case OX_SEND: ox_move(s_out, 0, 0, local, s.bytes, scale, a.scale); break;
      case OX_RECV: ox_move(dst, 0, s_in, 0, s.bytes, false, 0); break;
      case OX_RECV_REDUCE_SEND: ox_move(s_out, 0, s_in, local, s.bytes, scale, a.scale); break;
      case OX_RECV_REDUCE_COPY: ox_move(dst, 0, s_in, local, s.bytes, scale, a.scale); break;
      case OX_RECV_REDUCE_COPY_SEND: ox_move(dst, s_out, s_in, local, s.bytes, scale, a.scale); break;
      case OX_RECV_COPY_SEND: ox_move(dst, s_out, s_in, 0, s.bytes, false, 0); break;
      case OX_COPY:
        if (local != dst || scale) ox_move(dst, 0, 0, local, s.bytes, scale, a.scale);
        break;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      if (s.recv != OX_NO_CONN) {
        const OxConn& c = a.conns[s.recv];
        const u64 n = *c.counter + 1;
        *c.counter = n;
        *c.head = n;
      }
      if (s.send != OX_NO_CONN) {
        const OxConn& c = a.conns[s.send];
        const u64 n = *c.counter + 1;
        *c.counter = n;
        *c.tail = n;
      }
    }
  }
}

// buf[i] /= divisor, truncating toward zero: integer Avg, after the sum.
extern "C" __global__ void ox_divide(T* buf, u64 n, u64 divisor) {
#if OX_INT
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
#if OX_SIGNED
    buf[i] = (T)((long long)buf[i] / (long long)divisor);
#else
    buf[i] = (T)((unsigned long long)buf[i] / divisor);
#endif
  }
#endif
}
