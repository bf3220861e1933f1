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
// watches the abort flag (mapped host memory), the launch's timeout, and whether the peer
// it waits for has left (OxWatch).
//
// A connection over the network (OX_CONN_HOST) is a FIFO in pinned host memory mapped into
// the GPU, whose other end is this rank's network proxy: the sender also writes each
// message's size before the tail (the proxy sends that many bytes), and the receiver reads
// the slots with ld.global.cv, which discards a cached line of system memory and fetches
// it again (the proxy rewrote it from the CPU, which no GPU cache sees).

typedef unsigned int u32;

#ifndef OX_THREADS
#define OX_THREADS 512
#endif
// Steps a lane of ox_run keeps in shared memory at once.
#ifndef OX_WINDOW
#define OX_WINDOW 32
#endif
#ifndef OX_UNROLL
#define OX_UNROLL 4
#endif
// Lines a thread of an LL step reads ahead (ox_move_ll).
#ifndef OX_LL_UNROLL
#define OX_LL_UNROLL 4
#endif

__device__ __forceinline__ u64 ox_now() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// How long a wait goes on after the peer it waits for was seen gone: a peer leaves only
// after its last kernel ended, so what it sent is here already; this only covers the
// order in which its last stores and its gone flag become visible.
#define OX_GONE_GRACE_NS 1000000ull

// Spins until ready() holds: 0, or OX_ABORTED (the abort flag raised), OX_TIMED_OUT, or
// OX_PEER_LEFT (`peer` left the communicator and what was waited for never came). Every
// wait of the kernels goes through here. With Warp, every thread of a warp spins together
// (ready() may vote across the warp): lane 0's reading of the flags and clock decides for
// all, so that the warp leaves the loop as one.
template <bool Warp = false, typename Ready>
__device__ __forceinline__ int ox_spin(Ready ready, const OxWatch& w, u32 peer) {
  if (ready()) return 0;
  const u64 start = ox_now();
  u64 gone_at = 0;
  u32 spins = 0;
  while (!ready()) {
    if (++spins % 512 == 0) {
      int why = 0;
      if (!Warp || (threadIdx.x & 31) == 0) {
        const u64 now = ox_now();
        if (*w.abort) why = OX_ABORTED;
        else if (now - start > w.timeout_ns) why = OX_TIMED_OUT;
        else {
          if (!gone_at && w.gone[peer]) gone_at = now;
          if (gone_at && now - gone_at > OX_GONE_GRACE_NS) why = OX_PEER_LEFT;
        }
      }
      if (Warp) why = __shfl_sync(0xffffffffu, why, 0);
      if (why == OX_PEER_LEFT) return ready() ? 0 : OX_PEER_LEFT;
      if (why) return why;
    }
  }
  return 0;
}

// A system-scope acquire-release fence: orders this thread's earlier accesses (and those
// its block's barrier made it observe) before its later ones, as seen from the CPU.
__device__ __forceinline__ void ox_fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Waits until *word >= target, which `peer` writes.
__device__ int ox_wait_for(volatile u64* word, u64 target, const OxWatch& w, u32 peer) {
  return ox_spin([&] { return *word >= target; }, w, peer);
}

// A load that acquires at system scope: this thread's later accesses (and, through the
// block's next barrier, its block's) follow the writes the counter's writer released
// before it. Unlike a fence after a plain load, it waits for nothing of this thread's
// own: a fence there also waited for the last step's tail store to reach the peer GPU
// (~1 us a step on 4xH200).
__device__ __forceinline__ u64 ox_load_acquire(const volatile u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Waits until *word >= target (a counter a peer GPU writes after its release), each
// read an acquire.
__device__ int ox_wait_acquire(const volatile u64* word, u64 target, const OxWatch& w, u32 peer) {
  return ox_spin([&] { return ox_load_acquire(word) >= target; }, w, peer);
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

__device__ __forceinline__ T ox_load_fresh(const char* p) {
  Bits b = __ldcv((const Bits*)p);
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

// A vector of elements (uint4: 16 bytes, uint2: an LL line's 8), scaled or combined
// element by element.
template <typename V>
__device__ __forceinline__ V ox_scale_vec(V v, double s) {
  constexpr int each = sizeof(V) / sizeof(T);
  T e[each];
  memcpy(e, &v, sizeof(V));
#pragma unroll
  for (int i = 0; i < each; ++i) e[i] = ox_scale(e[i], s);
  memcpy(&v, e, sizeof(V));
  return v;
}

template <typename V>
__device__ __forceinline__ V ox_combine_vec(V x, V y) {
  constexpr int each = sizeof(V) / sizeof(T);
  T a[each], b[each];
  memcpy(a, &x, sizeof(V));
  memcpy(b, &y, sizeof(V));
#pragma unroll
  for (int i = 0; i < each; ++i) a[i] = ox_combine(a[i], b[i]);
  memcpy(&x, a, sizeof(V));
  return x;
}

__device__ __forceinline__ bool ox_aligned(const void* p) { return ((u64)p & 15) == 0; }

// d0 (and d1 when not null) = in (op) local, or in, or local; `local` scaled when `scale`.
// `in` and `local` are never both null. Every pointer is aligned to sizeof(T); `bytes` is a
// whole number of elements.
// Loads of `in`: through L2, or, when `fresh` (a slot in host memory the proxy rewrote),
// fetched again from memory.
template <typename V>
__device__ __forceinline__ V ox_load_in(const V* p, bool fresh) {
  return fresh ? __ldcv(p) : __ldcg(p);
}

__device__ void ox_move(char* d0, char* d1, const char* in, const char* local, u32 bytes, bool scale, double s, bool fresh) {
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
        if (a) v[u] = ox_load_in(a + i + u * OX_THREADS, fresh);
        if (b) w[u] = __ldcg(b + i + u * OX_THREADS);
      }
#pragma unroll
      for (int u = 0; u < OX_UNROLL; ++u) {
        if (b) {
          if (scale) w[u] = ox_scale_vec(w[u], s);
          v[u] = a ? ox_combine_vec(v[u], w[u]) : w[u];
        }
        x[i + u * OX_THREADS] = v[u];
        if (y) y[i + u * OX_THREADS] = v[u];
      }
    }
    // The rest (fewer than OX_UNROLL packs a thread) in one round as well, its loads all
    // issued before any store: a 16 KiB message, 2 packs a thread, waited for one load
    // latency, not two in turn.
    if (i < packs) {
      uint4 v[OX_UNROLL], w[OX_UNROLL];
#pragma unroll
      for (int u = 0; u < OX_UNROLL; ++u) {
        const u32 j = i + u * OX_THREADS;
        if (j < packs) {
          if (a) v[u] = ox_load_in(a + j, fresh);
          if (b) w[u] = __ldcg(b + j);
        }
      }
#pragma unroll
      for (int u = 0; u < OX_UNROLL; ++u) {
        const u32 j = i + u * OX_THREADS;
        if (j < packs) {
          if (b) {
            if (scale) w[u] = ox_scale_vec(w[u], s);
            v[u] = a ? ox_combine_vec(v[u], w[u]) : w[u];
          }
          x[j] = v[u];
          if (y) y[j] = v[u];
        }
      }
    }
    done = packs * 16;
  }
  if (!elementwise) {
    for (u32 i = done + tid; i < bytes; i += OX_THREADS) {
      char v = in ? ox_load_in(in + i, fresh) : __ldcg(local + i);
      d0[i] = v;
      if (d1) d1[i] = v;
    }
    return;
  }
  for (u32 i = done + tid * sizeof(T); i < bytes; i += OX_THREADS * sizeof(T)) {
    T v;
    if (in) v = fresh ? ox_load_fresh(in + i) : ox_load(in + i);
    if (local) {
      T w = ox_load(local + i);
      if (scale) w = ox_scale(w, s);
      v = in ? ox_combine(v, w) : w;
    }
    ox_store(d0 + i, v);
    if (d1) ox_store(d1 + i, v);
  }
}

// ---- LL lines: 8 bytes of data and a flag twice in one 16-byte store ----

__device__ __forceinline__ void ox_ll_store(char* p, uint2 d, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag) : "memory");
}

__device__ __forceinline__ uint4 ox_ll_load(const char* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

// Line l (8 bytes) of a buffer of `bytes` bytes; bytes past the end read as 0. `cg`: loads
// through L2 only (a GPU FIFO slot a peer rewrites, where L1 may hold stale lines).
__device__ __forceinline__ uint2 ox_line_get(const char* base, u64 l, u64 bytes, bool cg = false) {
  const char* p = base + l * 8;
  if (l * 8 + 8 <= bytes && ((u64)p & 7) == 0) return cg ? __ldcg((const uint2*)p) : *(const uint2*)p;
  unsigned char b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (u32 i = 0; i < 8 && l * 8 + i < bytes; ++i) b[i] = cg ? __ldcg((const unsigned char*)p + i) : p[i];
  uint2 d;
  memcpy(&d, b, 8);
  return d;
}

// Writes the bytes of line l that lie within `bytes`.
__device__ __forceinline__ void ox_line_put(char* base, u64 l, u64 bytes, uint2 d) {
  char* p = base + l * 8;
  if (l * 8 + 8 <= bytes && ((u64)p & 7) == 0) {
    *(uint2*)p = d;
    return;
  }
  unsigned char b[8];
  memcpy(b, &d, 8);
  for (u32 i = 0; i < 8 && l * 8 + i < bytes; ++i) p[i] = b[i];
}

// Waits until the inbox line at p, which `peer` writes, carries `flag`: 0 and its data in
// *out, or why not (as ox_spin).
__device__ int ox_ll_wait(const char* p, u32 flag, const OxWatch& w, u32 peer, uint2* out) {
  uint4 v;
  const int why = ox_spin([&] { v = ox_ll_load(p); return v.y == flag && v.w == flag; }, w, peer);
  *out = make_uint2(v.x, v.z);
  return why;
}

// The flag of the k-th message (k from 1): never 0, so memory not yet written never shows
// it (oxccl_kernels::device::ll::flag).
// Below 2^32 that is k itself: no 64-bit division where launches have sent fewer messages.
__device__ __forceinline__ u32 ox_ll_flag(u64 k) { return k <= 0xffffffffull ? (u32)k : (u32)((k - 1) % 0xffffffffull + 1); }

// The slot of message n in a FIFO of `slots`: a mask where `slots` is a power of two (the
// runtime's are), sparing a 64-bit division (a subroutine of some hundred instructions).
__device__ __forceinline__ u64 ox_slot(u64 n, u32 slots) { return (slots & (slots - 1)) == 0 ? n & (slots - 1) : n % slots; }

// One step of the executor where a network FIFO runs LL (DevArgs::ll): as ox_move, line by
// line. `in` is a slot to read, as LL lines flagged `flag_in` (in_ll: each thread waits
// for its own lines; line 0 is the header) or plain; `out` a slot to write, as LL lines
// flagged `flag_out` after a header line with the byte count (out_ll), or plain. 0, or
// why this thread stopped waiting (as ox_spin).
__device__ int ox_move_ll(char* dst, char* out, bool out_ll, const char* in, bool in_ll, const char* local, u32 bytes, bool scale, double s, u32 flag_in, u32 flag_out, const OxWatch& w, u32 peer_in) {
  const u64 lines = ((u64)bytes + 7) / 8;
  if (out && out_ll && threadIdx.x == 0) ox_ll_store(out, make_uint2(bytes, 0), flag_out);
  // The header only where there are no data lines (a message of no bytes has nothing
  // else to wait for): each data line carries its own flag, and waiting for the header
  // first put a whole read of the slot over PCIe (1-1.5 us) before the data's.
  if (in && in_ll && threadIdx.x == 0 && lines == 0) {
    uint2 header;
    const int why = ox_ll_wait(in, flag_in, w, peer_in, &header);
    if (why) return why;
  }
  // OX_LL_UNROLL lines a thread a round: every line's first read (the incoming LL line,
  // the local operand) issued before any is waited for, so that a round costs about one
  // load latency, not one per line; a line whose flag is not there yet is then polled
  // alone.
  const u64 stride = blockDim.x;
  for (u64 base = threadIdx.x; base < lines; base += OX_LL_UNROLL * stride) {
    uint4 raw[OX_LL_UNROLL];
    uint2 mine[OX_LL_UNROLL];
#pragma unroll
    for (int u = 0; u < OX_LL_UNROLL; ++u) {
      const u64 l = base + u * stride;
      if (l < lines) {
        if (in && in_ll) raw[u] = ox_ll_load(in + (l + 1) * 16);
        if (local) mine[u] = ox_line_get(local, l, bytes, true);
      }
    }
#pragma unroll
    for (int u = 0; u < OX_LL_UNROLL; ++u) {
      const u64 l = base + u * stride;
      if (l >= lines) break;
      uint2 v = make_uint2(0, 0);
      if (in) {
        if (in_ll) {
          if (raw[u].y == flag_in && raw[u].w == flag_in) {
            v = make_uint2(raw[u].x, raw[u].z);
          } else {
            const int why = ox_ll_wait(in + (l + 1) * 16, flag_in, w, peer_in, &v);
            if (why) return why;
          }
        } else {
          v = ox_line_get(in, l, bytes, true);
        }
      }
      if (local) {
        uint2 x = mine[u];
        if (scale) x = ox_scale_vec(x, s);
        v = in ? ox_combine_vec(v, x) : x;
      }
      if (dst) ox_line_put(dst, l, bytes, v);
      if (out) {
        if (out_ll) ox_ll_store(out + (l + 1) * 16, v, flag_out);
        else ox_line_put(out, l, bytes, v);
      }
    }
  }
  return 0;
}

// Reports why a lane stopped, and where: the kernel, its lane (block) and step (for
// ox_direct the peer waited for; for ox_p2p the lane's peer and message), and the peer
// waited for (plain stores: atomics on mapped host memory are not available everywhere;
// lanes racing here all report the same kind of failure).
__device__ void ox_fail(const OxWatch& w, int why, int kernel, u32 lane, u32 step, u32 peer) {
  volatile int* status = w.status;
  status[1] = (int)lane;
  status[2] = (int)step;
  status[3] = kernel;
  status[4] = (int)peer;
  __threadfence_system();
  status[0] = why;
}

// Whether connection c runs LL in a launch with DevArgs::ll bits `ll`.
__device__ __forceinline__ bool ox_runs_ll(u32 ll, const OxConn& c) {
  return (c.flags & OX_CONN_HOST) ? (ll & OX_LAUNCH_NET_LL) != 0 : (ll & OX_LAUNCH_PEER_LL) && (c.flags & OX_CONN_PEER_LL);
}

// One lane of the executor (block `lane` of a launch over a plan). `Simple`: every kind of
// step (ox_run). Without it (ox_run_ll), only steps that move over LL on one of their ends,
// and local copies: a small call's plan (the runtime checks the plan before it picks this
// entry, oxccl_kernels::device::ll_entry_fits; any other step stops the lane with
// OX_MISPLANNED). Without the Simple moves the kernel is about half the code and keeps its
// registers, and a small call's first send is published sooner.
template <bool Simple>
__device__ __forceinline__ void ox_lane(const OxArgs& a, const OxStep* steps, const u32* bounds, const OxConn* conns) {
  __shared__ int s_stop;
  // The lane's steps and their connections, OX_WINDOW at a time, loaded by all threads at
  // once (thread k step k and its two connections): a step then starts from shared memory,
  // not from a chain of dependent loads (step, connection, counter) in global memory.
  __shared__ OxStep w_steps[OX_WINDOW];
  __shared__ OxConn w_recv[OX_WINDOW], w_send[OX_WINDOW];
  // What each step of the window reads and writes, worked out with the window: its
  // message number on each connection (what *counter holds when the step starts), the
  // slots those numbers give and their LL flags, and, for a send, the receiver's head as
  // read with the window (over the network the last head a kernel read, kept beside the
  // counter: no round trip over PCIe). A connection end belongs to one lane (the
  // encoder's rule), so this block is the only writer of its counters; a step then does
  // no load and no arithmetic of its own before its wait (~0.5 us a step on 4xH200).
  __shared__ u64 w_recv_n[OX_WINDOW], w_send_n[OX_WINDOW], w_head[OX_WINDOW];
  __shared__ const char* w_in[OX_WINDOW];
  __shared__ char* w_out[OX_WINDOW];
  __shared__ u32 w_flag_in[OX_WINDOW], w_flag_out[OX_WINDOW];
  const u32 lane = blockIdx.x;
  const u32 first = bounds[lane], end = bounds[lane + 1];
  // The timeline (DevArgs::stamps): thread 0 of the first lanes stamps the lane's start and
  // end and each of its first steps' four moments (oxccl_kernels::device::timeline).
  unsigned long long* const stamps = (a.stamps && lane < OX_TRACE_LANES && threadIdx.x == 0) ? a.stamps + lane * OX_TRACE_LANE_WORDS : 0;
  if (stamps) stamps[0] = ox_now();
  for (u32 i = first; i < end; ++i) {
    const u32 k = (i - first) % OX_WINDOW;
    unsigned long long* const step_stamps = (stamps && i - first < OX_TRACE_STEPS) ? stamps + 2 + (i - first) * OX_TRACE_STAMPS : 0;
    if (k == 0) {
      // Every thread is past the window before (thread 0 published the last step from it).
      __syncthreads();
      const u32 t_k = threadIdx.x;
      const bool loads = t_k < OX_WINDOW && i + t_k < end;
      u64 recv_n = 0, send_n = 0;
      if (loads) {
        const OxStep t = steps[i + t_k];
        w_steps[t_k] = t;
        if (t.recv != OX_NO_CONN) {
          const OxConn c = conns[t.recv];
          w_recv[t_k] = c;
          recv_n = *c.counter;
        }
        if (t.send != OX_NO_CONN) {
          const OxConn c = conns[t.send];
          w_send[t_k] = c;
          send_n = *c.counter;
          // Over the network, the last head a kernel read (beside the counter, loaded with
          // it); between GPUs, the head itself.
          w_head[t_k] = (c.flags & OX_CONN_HOST) ? c.counter[1] : ox_load_acquire(c.head);
        }
      }
      __syncthreads();
      if (loads) {
        // Earlier steps of the window on the same end each add a message.
        const OxStep t = w_steps[t_k];
        for (u32 j = 0; j < t_k; ++j) {
          recv_n += t.recv != OX_NO_CONN && w_steps[j].recv == t.recv;
          send_n += t.send != OX_NO_CONN && w_steps[j].send == t.send;
        }
        w_recv_n[t_k] = recv_n;
        w_send_n[t_k] = send_n;
        w_in[t_k] = 0;
        w_out[t_k] = 0;
        // Message n goes through slot n % slots, over LL in that slot's LL lines, flagged
        // for message n + 1.
        if (t.recv != OX_NO_CONN) {
          const OxConn& c = w_recv[t_k];
          const u64 slot = ox_slot(recv_n, c.slots);
          w_in[t_k] = ox_runs_ll(a.ll, c) ? c.ll_slots + slot * c.ll_slot_bytes : c.slots_base + slot * c.slot_bytes;
          w_flag_in[t_k] = ox_ll_flag(recv_n + 1);
        }
        if (t.send != OX_NO_CONN) {
          const OxConn& c = w_send[t_k];
          const u64 slot = ox_slot(send_n, c.slots);
          w_out[t_k] = ox_runs_ll(a.ll, c) ? c.ll_slots + slot * c.ll_slot_bytes : c.slots_base + slot * c.slot_bytes;
          w_flag_out[t_k] = ox_ll_flag(send_n + 1);
        }
      }
      __syncthreads();
    }
    if (step_stamps) step_stamps[0] = ox_now();
    const OxStep s = w_steps[k];
    const OxConn& in_conn = w_recv[k];
    const OxConn& out_conn = w_send[k];
    // Connections the launch runs LL on (DevArgs::ll: over the network, between GPUs): their
    // own slots, no tail to wait for on receiving (each thread waits for its lines' flags),
    // no fence on sending (the proxy sends, or the peer reads, once every line shows the flag).
    const bool in_ll = s.recv != OX_NO_CONN && ox_runs_ll(a.ll, in_conn);
    const bool out_ll = s.send != OX_NO_CONN && ox_runs_ll(a.ll, out_conn);
    // A Simple slot in host memory, which the proxy rewrote from the CPU.
    const bool fresh = s.recv != OX_NO_CONN && !in_ll && (in_conn.flags & OX_CONN_HOST);
    if (threadIdx.x == 0) {
      int why = 0;
      u32 at = 0;
      // Whether this thread read, with a plain load, a head the proxy wrote, which the
      // block's writes to the slot must follow (an acquire); counters between GPUs are
      // read with acquire loads, LL lines carry their own readiness, and a step with no
      // connection reads nothing of anyone's.
      bool acquire = false;
      if (s.recv != OX_NO_CONN) {
        const OxConn& c = in_conn;
        const u64 n = w_recv_n[k];
        at = c.peer;
        if (fresh) why = ox_wait_for(c.tail, n + 1, a.watch, c.peer);
        else if (!in_ll) why = ox_wait_acquire(c.tail, n + 1, a.watch, c.peer);
      }
      if (!why && s.send != OX_NO_CONN) {
        const OxConn& c = out_conn;
        const u64 n = w_send_n[k];
        // Slot n % slots is free once the receiver consumed message n - slots. Over the
        // network the head is host memory (a round trip over PCIe per read): the last head
        // seen is kept in device memory after the counter, and the head read again only
        // when that one is short, once per `slots` messages when the proxy keeps up.
        if (n + 1 > c.slots) {
          const u64 need = n + 1 - c.slots;
          if (!(c.flags & OX_CONN_HOST)) {
            // The head read with the window (an acquire) is mostly far enough.
            if (w_head[k] < need) why = ox_wait_acquire(c.head, need, a.watch, c.peer);
          } else if (w_head[k] < need && c.counter[1] < need) {
            u64 seen = 0;
            why = ox_spin([&] { seen = *c.head; return seen >= need; }, a.watch, c.peer);
            c.counter[1] = seen;
            acquire = true;
          }
        }
        at = c.peer;
        // The proxy reads the size only once it sees the tail (published after the data,
        // below): written now, it needs no fence of its own.
        if (!why && !out_ll && c.sizes) c.sizes[ox_slot(n, c.slots)] = s.bytes;
      }
      if (why) ox_fail(a.watch, why, OX_KERNEL_RUN, lane, i - first, at);
      // Over the network the proxy wrote the slot from the CPU: order this block's reads
      // after the tail at system scope (an acquire; no sequential consistency needed).
      // Between GPUs the counters were read with acquire loads, which need no fence.
      // Nothing to order where no counter was read (a fence there cost ~0.5 us a step,
      // waiting for the last step's stores to host memory).
      if (fresh) ox_fence_acq_rel_sys(); else if (acquire) __threadfence();
      s_stop = why;
      if (step_stamps) step_stamps[1] = ox_now();
    }
    __syncthreads();
    if (s_stop) return;
    const char* const s_in = w_in[k];
    char* const s_out = w_out[k];
    const bool reads = s.kind == OX_SEND || s.kind == OX_RECV_REDUCE_SEND || s.kind == OX_RECV_REDUCE_COPY || s.kind == OX_RECV_REDUCE_COPY_SEND || s.kind == OX_COPY || s.kind == OX_COPY_SEND;
    const bool writes = s.kind != OX_SEND && s.kind != OX_RECV_REDUCE_SEND;
    const bool from_input = reads && !(s.src & OX_RECV_BUFFER);
    const char* local = !reads ? 0 : from_input ? a.send + s.src : a.recv + (s.src & ~OX_RECV_BUFFER);
    char* dst = writes ? a.recv + (s.dst & ~OX_RECV_BUFFER) : 0;
    // A fused send and copy in place (the output is the slice sent): the send alone.
    if (s.kind == OX_COPY_SEND && dst == local && !a.scaled) dst = 0;
    const bool scale = a.scaled && from_input;
    int why = 0;
    if (in_ll || out_ll) {
      why = ox_move_ll(dst, s_out, out_ll, s_in, in_ll, local, s.bytes, scale, a.scale, w_flag_in[k], w_flag_out[k], a.watch, in_ll ? in_conn.peer : 0);
    } else if (!Simple) {
      if (s.kind != OX_COPY) why = OX_MISPLANNED;
      else if (local != dst || scale) ox_move(dst, 0, 0, local, s.bytes, scale, a.scale, false);
    } else {
      switch (s.kind) {
        case OX_SEND: ox_move(s_out, 0, 0, local, s.bytes, scale, a.scale, false); break;
        case OX_RECV: ox_move(dst, 0, s_in, 0, s.bytes, false, 0, fresh); break;
        case OX_RECV_REDUCE_SEND: ox_move(s_out, 0, s_in, local, s.bytes, scale, a.scale, fresh); break;
        case OX_RECV_REDUCE_COPY: ox_move(dst, 0, s_in, local, s.bytes, scale, a.scale, fresh); break;
        case OX_RECV_REDUCE_COPY_SEND: ox_move(dst, s_out, s_in, local, s.bytes, scale, a.scale, fresh); break;
        case OX_RECV_COPY_SEND: ox_move(dst, s_out, s_in, 0, s.bytes, false, 0, fresh); break;
        case OX_COPY:
          if (local != dst || scale) ox_move(dst, 0, 0, local, s.bytes, scale, a.scale, false);
          break;
        case OX_COPY_SEND:
          if (dst) ox_move(dst, s_out, 0, local, s.bytes, scale, a.scale, false);
          else ox_move(s_out, 0, 0, local, s.bytes, scale, a.scale, false);
          break;
      }
    }
    if (__syncthreads_or(why)) {
      // Some thread's LL wait gave up: it says why, and the lane stops.
      if (why) ox_fail(a.watch, why, OX_KERNEL_RUN, lane, i - first, in_conn.peer);
      return;
    }
    if (step_stamps) step_stamps[2] = ox_now();
    if (threadIdx.x == 0) {
      // A step that sends publishes the block's writes before its tail with a release at
      // system scope (the tail's reader is a peer's GPU or the proxy), as NCCL's
      // postPeer does. No fence where nothing is sent: a receive's head only frees the
      // slot, whose reads are done (every thread used what it loaded before the barrier
      // above; NCCL's receives post their head with none either), and a local copy
      // publishes nothing (a later step of the block reads its writes after
      // __syncthreads, and the fence of the step that sends them covers them: fences are
      // cumulative). Nor on LL connections: their lines carry their readiness.
      // (2×H200 before: a receive's publish 1.8 us, a send's 3.6, with fence.sc.sys.)
      const bool all_ll = (in_ll || out_ll) && (s.recv == OX_NO_CONN || in_ll) && (s.send == OX_NO_CONN || out_ll);
      if (s.send != OX_NO_CONN && !all_ll) ox_fence_acq_rel_sys();
      if (s.recv != OX_NO_CONN) {
        const OxConn& c = in_conn;
        const u64 n = w_recv_n[k] + 1;
        *c.counter = n;
        *c.head = n;
      }
      if (s.send != OX_NO_CONN) {
        const OxConn& c = out_conn;
        const u64 n = w_send_n[k] + 1;
        *c.counter = n;
        *c.tail = n;
      }
      if (step_stamps) step_stamps[3] = ox_now();
    }
  }
  if (stamps) {
    stamps[1] = ox_now();
    // Lane 0 pins the timeline to the host's clock: the host word read between two
    // readings of the timer. Storing what the load returned waits for it, and the second
    // reading issues after that store.
    if (lane == 0 && a.clock) {
      unsigned long long* const clock = a.stamps + OX_TRACE_CLOCK;
      clock[0] = ox_now();
      *(volatile unsigned long long*)(clock + 1) = *a.clock;
      clock[2] = ox_now();
    }
  }
}

extern "C" __global__ void __launch_bounds__(OX_THREADS) ox_run(const OxArgs a) { ox_lane<true>(a, a.steps, a.bounds, a.conns); }

// The LL entry's arguments (oxccl_kernels::device::ll_args): OxArgs, whose steps, bounds and
// conns are then offsets into `image`, the plan's image (its connection table, bounds and
// steps as uploaded) by value. The block reads its steps and their connections from its
// parameters (the constant bank) instead of through three dependent loads from global
// memory. A launch passes only the bytes its plan has, as NCCL's kernels take their work.
struct OxArgsLl {
  OxArgs args;
  u32 image_bytes;
  u32 pad;
  uint4 image[OX_LL_IMAGE_BYTES / 16];
};
// No padding before the image (NVRTC has no offsetof): it starts where Rust puts it.
static_assert(sizeof(OxArgsLl) == OX_LL_IMAGE_OFFSET + OX_LL_IMAGE_BYTES, "OxArgsLl's image is not where Rust puts it");

extern "C" __global__ void __launch_bounds__(OX_THREADS) ox_run_ll(const __grid_constant__ OxArgsLl a) {
  const char* const image = (const char*)a.image;
  ox_lane<false>(a.args, (const OxStep*)(image + (u64)a.args.steps), (const u32*)(image + (u64)a.args.bounds), (const OxConn*)(image + (u64)a.args.conns));
}

// What a direct launch's mode asks of this rank, for ox_direct and ox_direct_ll128 alike:
// whom it sends to, whom it hears from, what it sends and where what it hears goes. It
// copies the few arguments it needs (no reference to the kernel's parameters, whose
// address would move them to local memory).
struct OxDirectRoles {
  const char* send;
  char* recv;
  u64 bytes;
  u32 rank, root, mode;
  bool blocks;              // reduce_scatter, two shots: block d of the input goes to d
  bool only_root_sends;     // broadcast
  bool only_root_receives;  // reduce
  bool reduce;              // contributions are folded in rank order, not gathered
  __device__ explicit OxDirectRoles(const OxDirect& a)
      : send(a.send),
        recv(a.recv),
        bytes(a.bytes),
        rank(a.rank),
        root(a.root),
        mode(a.mode),
        blocks(a.mode == OX_DIRECT_REDUCE_SCATTER || a.mode == OX_DIRECT_TWO_SHOT),
        only_root_sends(a.mode == OX_DIRECT_BROADCAST),
        only_root_receives(a.mode == OX_DIRECT_REDUCE),
        reduce(a.mode == OX_DIRECT_ALL_REDUCE || a.mode == OX_DIRECT_REDUCE || a.mode == OX_DIRECT_REDUCE_SCATTER || a.mode == OX_DIRECT_TWO_SHOT) {}
  __device__ bool sends_to(u32 d) const { return d != rank && (!only_root_sends || rank == root) && (!only_root_receives || d == root); }
  __device__ bool receives() const { return !only_root_receives || rank == root; }
  __device__ bool hears(u32 p) const { return !only_root_sends || p == root; }
  // What goes to d; src(rank) is this rank's own contribution.
  __device__ const char* src(u32 d) const { return send + (blocks ? (u64)d * bytes : 0); }
  // Where what p sent goes when gathered (block p; block p as p folded it in two shots) or
  // broadcast; out(rank) is where a reduction's own fold goes.
  __device__ char* out(u32 p) const { return recv + (mode == OX_DIRECT_ALL_GATHER || mode == OX_DIRECT_TWO_SHOT ? (u64)p * bytes : 0); }
};

// This launch's row for `sender` in the inbox at `inbox` (this rank's or a peer's), among
// the rows at `offset` (a.rows_offset: this launch's protocol's; a.second_offset: the
// second shot's): this launch's half of them (rows half + sender).
__device__ __forceinline__ char* ox_direct_row(const OxDirect& a, const char* inbox, u64 offset, u32 sender) {
  return (char*)inbox + offset + ((a.launch & 1) * a.nranks + sender) * (u64)a.cap_lines * 16;
}
// acks[p], the last launch rank p is known to have finished.
__device__ __forceinline__ volatile u64* ox_direct_acks(const OxDirect& a) { return (volatile u64*)(a.inbox + a.ack_offset); }

// ---- LL128 lines for the direct kernel (calls of OXCCL_GPU_DIRECT_LL128_BYTES or more) ----
//
// A line is 128 bytes: OX_LL128_WORDS data words of 8 bytes, then the flag word (the
// launch's flag twice). Eight threads of a warp own a line, thread t its 16 bytes at t * 16:
// words 2t and 2t + 1, the eighth word 14 and the flag. They store it in one instruction,
// which NVLink delivers to the 128-byte line whole (NCCL's LL128 relies on the same), and
// they load it in one, so the flag thread seeing the flag means the line is there; a warp
// whose flag threads do not all see theirs loads its lines again. Loops run per warp (4
// lines a warp a round), so that every thread of a warp takes part in every store, load
// and vote.

// The largest of the warp's `why`s, on every thread of it (the status codes are positive).
__device__ __forceinline__ int ox_warp_why(int why) {
  for (int o = 16; o > 0; o >>= 1) why = max(why, __shfl_xor_sync(0xffffffffu, why, o));
  return why;
}

// Waits until the line part at p (this thread's 16 bytes) carries `flag` in its line's
// flag word, which the thread with `flag_thread` holds; `active`: the thread's line is one
// of the message's (an inactive thread loads a valid address all the same, so that the
// warp's load stays one instruction, and its part is not checked). 0 and the part in
// *out, or why not (ox_spin for the warp). Every thread of the warp calls it.
__device__ int ox_ll128_wait(const char* p, bool active, bool flag_thread, u32 flag, const OxWatch& w, u32 peer, uint4* out) {
  uint4 v;
  const int why = ox_spin<true>([&] {
    __syncwarp();
    v = ox_ll_load(p);
    return !__any_sync(0xffffffffu, active && flag_thread && (v.z != flag || v.w != flag));
  }, w, peer);
  *out = v;
  return why;
}

// Stores this thread's 16 bytes of an LL128 line at p: words x and y (y the flag word on
// the line's flag thread). The warp's eight threads of a line store it in one instruction.
__device__ __forceinline__ void ox_ll128_put(char* p, uint2 x, uint2 y) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(x.x), "r"(x.y), "r"(y.x), "r"(y.y) : "memory");
}

// Writes this thread's part of a line's data, words w0 and (but on the flag thread, whose
// second word is the flag) w0 + 1, into `base`, a buffer of `bytes` bytes.
__device__ __forceinline__ void ox_ll128_part_put(char* base, u64 w0, u64 bytes, bool flag_thread, uint2 x, uint2 y) {
  ox_line_put(base, w0, bytes, x);
  if (!flag_thread) ox_line_put(base, w0 + 1, bytes, y);
}

// The direct kernel's sends and receives over LL128 lines (ox_direct's, line for line):
// 0, or why a wait stopped, the peer in *at. In two shots (OX_DIRECT_TWO_SHOT) the first
// shot is reduce_scatter's; each warp then sends the lines it folded on to every other
// rank, and takes the others' folded blocks in place from the second shot's rows.
__device__ __forceinline__ int ox_direct_ll128(const OxDirect& a, u32* at) {
  const u64 words = (a.bytes + 7) / 8;
  const u64 lines = (words + OX_LL128_WORDS - 1) / OX_LL128_WORDS;
  const u32 t = threadIdx.x & 7;
  const bool flag_thread = t == 7;
  // Lines 4w .. 4w + 3 for warp w of the grid, then a grid of warps on.
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
  const u64 mine = (threadIdx.x & 31) >> 3;
  const u32 flag = a.epoch;
  const OxDirectRoles r(a);
  const bool two_shot = a.mode == OX_DIRECT_TWO_SHOT;
  int why = 0;

  for (u32 d = 0; d < a.nranks && !why; ++d) {
    if (!r.sends_to(d)) continue;
    *at = d;
    const char* src = r.src(d);
    char* dst = ox_direct_row(a, a.peers[d], a.rows_offset, a.rank);
    // d's half is free once d finished the launch two before (the last that can have
    // used it, over either protocol).
    if (a.launch > 2 && warp * 4 < lines) why = ox_warp_why(ox_wait_for(ox_direct_acks(a) + d, a.launch - 2, a.watch, d));
    for (u64 base = warp * 4; base < lines && !why; base += warps * 4) {
      const u64 l = base + mine;
      const u64 w0 = l * OX_LL128_WORDS + 2 * t;
      uint2 x = make_uint2(0, 0), y = make_uint2(flag, flag);
      if (l < lines) {
        x = ox_line_get(src, w0, a.bytes);
        if (!flag_thread) y = ox_line_get(src, w0 + 1, a.bytes);
        if (a.scaled) {
          x = ox_scale_vec(x, a.scale);
          if (!flag_thread) y = ox_scale_vec(y, a.scale);
        }
      }
      __syncwarp();
      if (l < lines) ox_ll128_put(dst + l * 128 + t * 16, x, y);
    }
  }
  if (why) return why;

  const char* own = r.src(a.rank);
  for (u64 base = warp * 4; r.receives() && base < lines; base += warps * 4) {
    const u64 l = base + mine;
    const bool active = l < lines;
    const u64 w0 = l * OX_LL128_WORDS + 2 * t;
    uint2 acc0 = make_uint2(0, 0), acc1 = make_uint2(0, 0);
    for (u32 p = 0; p < a.nranks; ++p) {
      if (!r.hears(p)) continue;
      uint2 v0, v1 = make_uint2(0, 0);
      if (p == a.rank) {
        if (r.only_root_sends && a.send == a.recv) break;  // broadcast in place: nothing to do
        v0 = active ? ox_line_get(own, w0, a.bytes) : make_uint2(0, 0);
        if (active && !flag_thread) v1 = ox_line_get(own, w0 + 1, a.bytes);
        if (a.scaled) {
          v0 = ox_scale_vec(v0, a.scale);
          v1 = ox_scale_vec(v1, a.scale);
        }
      } else {
        uint4 v;
        const char* line = ox_direct_row(a, a.inbox, a.rows_offset, p) + (active ? l : 0) * 128 + t * 16;
        why = ox_ll128_wait(line, active, flag_thread, flag, a.watch, p, &v);
        if (why) {
          *at = p;
          return why;
        }
        v0 = make_uint2(v.x, v.y);
        if (!flag_thread) v1 = make_uint2(v.z, v.w);
      }
      if (r.reduce) {
        acc0 = p == 0 ? v0 : ox_combine_vec(acc0, v0);
        acc1 = p == 0 ? v1 : ox_combine_vec(acc1, v1);
      } else if (active) {
        ox_ll128_part_put(r.out(p), w0, a.bytes, flag_thread, v0, v1);
      }
    }
    if (r.reduce && active) ox_ll128_part_put(r.out(a.rank), w0, a.bytes, flag_thread, acc0, acc1);
    // Two shots: the folded line goes on to every other rank at once (this warp waited for
    // each one's acknowledgement before its first shot, for the same lines).
    if (two_shot) {
      const uint2 y = flag_thread ? make_uint2(flag, flag) : acc1;
      __syncwarp();
      for (u32 d = 0; d < a.nranks && active; ++d) {
        if (d != a.rank) ox_ll128_put(ox_direct_row(a, a.peers[d], a.second_offset, a.rank) + l * 128 + t * 16, acc0, y);
      }
    }
  }
  if (!two_shot) return 0;

  // The second shot: block p as p folded it, for every other rank p.
  for (u64 base = warp * 4; base < lines; base += warps * 4) {
    const u64 l = base + mine;
    const bool active = l < lines;
    const u64 w0 = l * OX_LL128_WORDS + 2 * t;
    for (u32 p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      uint4 v;
      why = ox_ll128_wait(ox_direct_row(a, a.inbox, a.second_offset, p) + (active ? l : 0) * 128 + t * 16, active, flag_thread, flag, a.watch, p, &v);
      if (why) {
        *at = p;
        return why;
      }
      if (active) ox_ll128_part_put(r.out(p), w0, a.bytes, flag_thread, make_uint2(v.x, v.y), make_uint2(v.z, v.w));
    }
  }
  return 0;
}

// ---- The direct kernel: a small collective in one hop, over the LL protocol ----
//
// Every rank writes its data straight into the receivers' inboxes (OxDirect), 8 bytes of
// data and the launch's flag twice in one 16-byte volatile store, so a line's data and its
// readiness arrive together; receivers spin on their own inbox lines until the flags match,
// then reduce or copy. No handshake, no barrier: one NVLink hop where a ring takes 2(n-1).
// Each thread owns lines l = its index + k * grid: the same lines in both phases, so a
// rank's own input line is read before its output line is written (in place is safe).
// Reductions combine the n contributions in rank order on every rank, so all ranks get
// bit-identical results. With OxDirect::ll128 the lines are LL128's (ox_direct_ll128,
// above), each thread's words again the same in both phases, in rows of their own (an LL
// line holds its flag where an LL128 line holds data).

extern "C" __global__ void __launch_bounds__(OX_THREADS) ox_direct(const OxDirect a) {
  const u64 lines = (a.bytes + 7) / 8;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u32 flag = a.epoch;
  const OxDirectRoles r(a);
  int why = 0;
  u32 at = 0;

  // This launch running means the one before it ended here: say so to every peer first
  // (early, so the stores are long done when the kernel ends).
  for (u32 d = threadIdx.x; blockIdx.x == 0 && d < a.nranks; d += blockDim.x) {
    if (d != a.rank) *(volatile u64*)(a.peers[d] + a.ack_offset + (u64)a.rank * 8) = a.launch - 1;
  }
  // Over LL128 lines; two shots (OX_DIRECT_TWO_SHOT) only ever come that way.
  if (a.ll128) {
    why = ox_direct_ll128(a, &at);
    if (why) ox_fail(a.watch, why, OX_KERNEL_DIRECT, blockIdx.x, at, at);
    return;
  }

  for (u32 d = 0; d < a.nranks && !why; ++d) {
    if (!r.sends_to(d)) continue;
    at = d;
    const char* src = r.src(d);
    char* dst = ox_direct_row(a, a.peers[d], a.rows_offset, a.rank);
    u64 l = first;
    // The first line's load is issued before the acknowledgement is checked: both wait
    // for memory at once.
    uint2 v = l < lines ? ox_line_get(src, l, a.bytes) : make_uint2(0, 0);
    // d's half is free once d finished the launch two before (the last that can have
    // used it, over either protocol).
    if (a.launch > 2 && l < lines) why = ox_wait_for(ox_direct_acks(a) + d, a.launch - 2, a.watch, d);
    for (; l < lines && !why; l += stride) {
      if (l != first) v = ox_line_get(src, l, a.bytes);
      if (a.scaled) v = ox_scale_vec(v, a.scale);
      ox_ll_store(dst + l * 16, v, flag);
    }
  }

  // A rank's own contribution, read where it lies (block `rank` when scattering).
  const char* own = r.src(a.rank);
  const bool receives = !why && r.receives();
  for (u64 l = first; receives && l < lines && !why; l += stride) {
    uint2 acc = make_uint2(0, 0);
    for (u32 p = 0; p < a.nranks; ++p) {
      if (!r.hears(p)) continue;
      uint2 v;
      if (p == a.rank) {
        if (r.only_root_sends && a.send == a.recv) break;  // broadcast in place: nothing to do
        v = ox_line_get(own, l, a.bytes);
        if (a.scaled) v = ox_scale_vec(v, a.scale);
      } else {
        why = ox_ll_wait(ox_direct_row(a, a.inbox, a.rows_offset, p) + l * 16, flag, a.watch, p, &v);
        if (why) {
          at = p;
          break;
        }
      }
      if (r.reduce) {
        acc = p == 0 ? v : ox_combine_vec(acc, v);
      } else {
        ox_line_put(r.out(p), l, a.bytes, v);
      }
    }
    if (r.reduce && !why) ox_line_put(r.out(a.rank), l, a.bytes, acc);
  }

  if (why) ox_fail(a.watch, why, OX_KERNEL_DIRECT, blockIdx.x, at, at);
}

// ---- Point-to-point over LL: a group's small sends and receives in one hop ----
//
// One block per lane: the messages for one peer in one direction, in call order (a lane
// per peer and direction is what keeps any mix of groups free of deadlock; see
// runtime/src/gpu/p2p_model.rs). Messages are counted per ordered pair over the
// communicator's life, in this rank's counters: message k to d goes into half k & 1 of
// d's row for this rank, flagged k, once d acknowledged message k - 2; a receiver
// acknowledges each message as soon as every thread of its block has read its lines.
// A lane of copies, when there is one, moves the rank's sends to itself. In place (an
// alltoall whose send and recv are one buffer) a lane per peer exchanges: it sends each
// message, then receives the peer's over it; its sends wait only for acknowledgements of
// messages two back, as any send lane's, so exchanging lanes never wait on each other's
// receives.

extern "C" __global__ void __launch_bounds__(OX_THREADS) ox_p2p(const OxP2p a) {
  const OxP2pLane lane = a.lanes[blockIdx.x];
  if (lane.kind == OX_LANE_COPY) {
    // This rank's sends to itself: plain copies, beside the other lanes.
    for (u32 m = lane.first; m < lane.end; ++m) {
      const OxP2pMsg msg = a.msgs[m];
      const u64 lines = (msg.bytes + 7) / 8;
      char* dst = a.recv_base + msg.addr;
      const char* src = a.send_base + msg.src;
      for (u64 l = threadIdx.x; l < lines; l += blockDim.x) ox_line_put(dst, l, msg.bytes, ox_line_get(src, l, msg.bytes));
    }
    return;
  }
  // An exchange lane sends each message, then receives the peer's over it (in place).
  const bool exchange = lane.kind == OX_LANE_EXCHANGE;
  const bool sends = lane.kind == OX_LANE_SEND || exchange;
  const bool receives = lane.kind == OX_LANE_RECV || exchange;
  u64* const counters = (u64*)(a.inbox + a.count_offset);
  const u64 sent_before = counters[lane.peer], received_before = counters[a.nranks + lane.peer];
  volatile u64* ack = (volatile u64*)(a.inbox + a.ack_offset) + lane.peer;
  char* peer = a.peers[lane.peer];
  int why = 0;
  bool sending = false;
  u32 m = lane.first;
  for (; m < lane.end; ++m) {
    const OxP2pMsg msg = a.msgs[m];
    const u64 lines = (msg.bytes + 7) / 8;
    if (sends) {
      sending = true;
      const char* at = a.send_base + msg.addr;
      const u64 k = sent_before + 1 + (m - lane.first);
      const u32 flag = ox_ll_flag(k);
      char* row = peer + ((u64)a.rank * 2 + (k & 1)) * a.cap_lines * 16;
      u64 l = threadIdx.x;
      uint2 v = l < lines ? ox_line_get(at, l, msg.bytes) : make_uint2(0, 0);
      // The half is free once the peer read message k - 2, the last one in it.
      if (k > 2 && l < lines) why = ox_wait_for(ack, k - 2, a.watch, lane.peer);
      for (; l < lines && !why; l += blockDim.x) {
        if (l != threadIdx.x) v = ox_line_get(at, l, msg.bytes);
        ox_ll_store(row + l * 16, v, flag);
      }
      // Every thread read what it sends before any writes over it (an exchange).
      if (exchange && __syncthreads_or(why)) break;
    }
    if (receives) {
      sending = false;
      char* at = a.recv_base + msg.addr;
      const u64 k = received_before + 1 + (m - lane.first);
      const u32 flag = ox_ll_flag(k);
      const char* row = a.inbox + ((u64)lane.peer * 2 + (k & 1)) * a.cap_lines * 16;
      for (u64 l = threadIdx.x; l < lines && !why; l += blockDim.x) {
        uint2 v;
        why = ox_ll_wait(row + l * 16, flag, a.watch, lane.peer, &v);
        if (!why) ox_line_put(at, l, msg.bytes, v);
      }
    }
    // Every thread is done with the message (or some thread gave up).
    if (__syncthreads_or(why)) break;
    if (receives && threadIdx.x == 0) *(volatile u64*)(peer + a.ack_offset + (u64)a.rank * 8) = received_before + 1 + (m - lane.first);
  }
  if (m < lane.end) {
    if (why) ox_fail(a.watch, why, sending ? OX_KERNEL_P2P_SEND : OX_KERNEL_P2P_RECV, lane.peer, m - lane.first, lane.peer);
    return;
  }
  if (threadIdx.x == 0) {
    if (sends) counters[lane.peer] = sent_before + (lane.end - lane.first);
    if (receives) counters[a.nranks + lane.peer] = received_before + (lane.end - lane.first);
  }
}

// Says that the stream reached staged operation `target` (*reached, mapped host memory:
// the input copies before it are done, so the host may start), then holds the stream
// until *done (written by the host) reaches `target`: the host's part of the operation
// (runtime/src/gpu/staged.rs) is done. One thread; the wait watches the abort flag and the
// timeout like every other.
extern "C" __global__ void ox_wait_host(const volatile u64* done, volatile u64* reached, u64 target, const OxWatch w, u32 rank) {
  *reached = target;
  __threadfence_system();
  const int why = ox_spin([&] { return *done >= target; }, w, rank);
  if (why) ox_fail(w, why, OX_KERNEL_WAIT_HOST, 0, 0, rank);
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
