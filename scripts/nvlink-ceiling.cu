// nvlink-ceiling: what the link between GPU 0 and GPU 1 carries at most, measured without
// any collective library, as the ceiling for oxccl's and NCCL's 2-GPU bandwidth.
//
// With peer access enabled both ways, over 1 GiB buffers, each case once checked (the
// destination zeroed first, then a sample of 16 × 64 KiB compared with the pattern the
// source was filled with), then 3 warm-up and 10 timed repetitions, each timed with CUDA
// events on GPU 0 (a short spin kernel holds the stream until every operation is queued;
// for two directions GPU 1's stream waits on GPU 0's start event and GPU 0's stream on GPU
// 1's end event, so a repetition runs from both starts to both ends):
//   (a) copy engine, one direction: cudaMemcpyPeerAsync GPU0 -> GPU1
//   (b) copy engine, both directions at once (GPU0 -> GPU1 on a stream of GPU 0, GPU1 -> GPU0
//       on a stream of GPU 1)
//   (c) SM copy, one direction: a kernel on GPU 0 loads its local buffer and stores into
//       GPU 1's with 16-byte (uint4) grid-stride loads and stores, grid 4 × SMs, 512 threads
//   (d) SM copy, both directions at once (the kernel of (c) on both GPUs, each writing into
//       the other's buffer)
//   (e) SM write to peer, both directions at once, grid 64 blocks × 512 threads (what a
//       64-channel ring uses)
// One line per case: the mean, best and worst time and GB/s per direction (1 GB = 1e9
// bytes; per direction = bytes / time). Any CUDA error or wrong value exits non-zero.
// Never touches clocks or modes and uses no NVLink multicast.
//
// Build and run (on a machine with at least 2 GPUs):
//   nvcc -O2 -o nvlink-ceiling scripts/nvlink-ceiling.cu && ./nvlink-ceiling
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,           \
              cudaGetErrorString(err_), (int)err_);                                       \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static const size_t kBytes = size_t(1) << 30;
static const size_t kWords = kBytes / sizeof(uint32_t);
static const int kWarmup = 3;
static const int kTimed = 10;
static const int kThreads = 512;

__host__ __device__ inline uint32_t pattern(size_t i, uint32_t seed) {
  return uint32_t(i * 2654435761ull) ^ seed;
}

__global__ void fill(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = pattern(i, seed);
}

__global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Holds its stream for about `ns` nanoseconds, so that the operations queued behind it
// are all queued before the start event is recorded.
__global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

struct Op {
  int dev;           // the device whose stream runs it
  bool sm;           // SM copy kernel (else copy engine)
  int grid;          // blocks, for the SM copy
  const void* src;
  int srcDev;
  void* dst;
  int dstDev;
  uint32_t seed;     // the source's fill pattern, to verify dst
};

static cudaStream_t streams[2];
static cudaEvent_t evStart, evEnd, evDone1;  // evStart, evEnd on GPU 0; evDone1 on GPU 1

static void launch(const Op& op) {
  CK(cudaSetDevice(op.dev));
  if (op.sm) {
    copy16<<<op.grid, kThreads, 0, streams[op.dev]>>>((const uint4*)op.src, (uint4*)op.dst,
                                                      kBytes / sizeof(uint4));
    CK(cudaGetLastError());
  } else {
    CK(cudaMemcpyPeerAsync(op.dst, op.dstDev, op.src, op.srcDev, kBytes, streams[op.dev]));
  }
}

// One repetition of ops (ops[0] on GPU 0, an optional ops[1] on GPU 1, concurrently);
// returns milliseconds from the start event to the end event, both on GPU 0.
static float runOnce(const std::vector<Op>& ops) {
  CK(cudaSetDevice(0));
  spin<<<1, 1, 0, streams[0]>>>(200000);
  CK(cudaGetLastError());
  CK(cudaEventRecord(evStart, streams[0]));
  if (ops.size() > 1) {
    CK(cudaSetDevice(1));
    CK(cudaStreamWaitEvent(streams[1], evStart, 0));
    launch(ops[1]);
    CK(cudaSetDevice(1));
    CK(cudaEventRecord(evDone1, streams[1]));
  }
  launch(ops[0]);
  CK(cudaSetDevice(0));
  if (ops.size() > 1) CK(cudaStreamWaitEvent(streams[0], evDone1, 0));
  CK(cudaEventRecord(evEnd, streams[0]));
  CK(cudaEventSynchronize(evEnd));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, evStart, evEnd));
  return ms;
}

static void verify(const char* name, const Op& op) {
  const size_t chunk = 16384;  // words: 64 KiB
  const int samples = 16;
  std::vector<uint32_t> host(chunk);
  for (int k = 0; k < samples; k++) {
    size_t first = size_t(k) * ((kWords - chunk) / (samples - 1));
    if (k == samples - 1) first = kWords - chunk;
    CK(cudaMemcpy(host.data(), (const uint32_t*)op.dst + first, chunk * sizeof(uint32_t),
                  cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < chunk; j++) {
      uint32_t want = pattern(first + j, op.seed);
      if (host[j] != want) {
        fprintf(stderr, "%s: wrong value on GPU %d at word %zu: 0x%08x, expected 0x%08x\n",
                name, op.dstDev, first + j, host[j], want);
        exit(2);
      }
    }
  }
}

static void runCase(const char* name, const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    CK(cudaSetDevice(op.dstDev));
    CK(cudaMemset(op.dst, 0, kBytes));
    CK(cudaDeviceSynchronize());
  }
  runOnce(ops);
  for (const Op& op : ops) verify(name, op);
  for (int i = 0; i < kWarmup; i++) runOnce(ops);
  double sum = 0, best = 1e30, worst = 0;
  for (int i = 0; i < kTimed; i++) {
    double ms = runOnce(ops);
    sum += ms;
    if (ms < best) best = ms;
    if (ms > worst) worst = ms;
  }
  double mean = sum / kTimed;
  double gbs = kBytes / (mean * 1e-3) / 1e9;
  printf("%s: mean %.3f ms (best %.3f, worst %.3f) over %d reps; per direction %.1f GB/s "
         "(best rep %.1f, worst rep %.1f)",
         name, mean, best, worst, kTimed, gbs, kBytes / (best * 1e-3) / 1e9,
         kBytes / (worst * 1e-3) / 1e9);
  if (ops.size() > 1) printf("; both directions together %.1f GB/s", 2 * gbs);
  printf("; verified\n");
  fflush(stdout);
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 2) {
    fprintf(stderr, "needs 2 GPUs, found %d\n", count);
    return 1;
  }
  int sms[2];
  void* src[2];
  void* dst[2];
  const uint32_t seeds[2] = {0x9E3779B9u, 0x7F4A7C15u};
  for (int d = 0; d < 2; d++) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, d));
    CK(cudaDeviceGetAttribute(&sms[d], cudaDevAttrMultiProcessorCount, d));
    int peer = 1 - d, can = 0;
    CK(cudaDeviceCanAccessPeer(&can, d, peer));
    if (!can) {
      fprintf(stderr, "GPU %d cannot access GPU %d as a peer\n", d, peer);
      return 1;
    }
    CK(cudaSetDevice(d));
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      CK(e);
    }
    printf("GPU %d: %s, %d SMs, PCI %04x:%02x:%02x, peer access to GPU %d enabled\n", d,
           prop.name, sms[d], prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, peer);
    CK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
    CK(cudaMalloc(&src[d], kBytes));
    CK(cudaMalloc(&dst[d], kBytes));
    fill<<<4 * sms[d], kThreads>>>((uint32_t*)src[d], kWords, seeds[d]);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&evStart));
  CK(cudaEventCreate(&evEnd));
  CK(cudaSetDevice(1));
  CK(cudaEventCreate(&evDone1));
  printf("buffers %zu bytes; %d warm-up + %d timed reps per case; GB/s = 1e9 bytes/s\n",
         kBytes, kWarmup, kTimed);
  fflush(stdout);

  // ops[0] always runs on GPU 0 (GPU0 -> GPU1), ops[1] on GPU 1 (GPU1 -> GPU0).
  Op ce01 = {0, false, 0, src[0], 0, dst[1], 1, seeds[0]};
  Op ce10 = {1, false, 0, src[1], 1, dst[0], 0, seeds[1]};
  Op sm01 = {0, true, 4 * sms[0], src[0], 0, dst[1], 1, seeds[0]};
  Op sm10 = {1, true, 4 * sms[1], src[1], 1, dst[0], 0, seeds[1]};
  Op sm01r = sm01, sm10r = sm10;
  sm01r.grid = 64;
  sm10r.grid = 64;

  runCase("(a) copy engine, one direction (GPU0->GPU1, cudaMemcpyPeerAsync)", {ce01});
  runCase("(b) copy engine, both directions at once", {ce01, ce10});
  char name[160];
  snprintf(name, sizeof name, "(c) SM copy, one direction (GPU0->GPU1, %d blocks x %d threads, uint4)",
           sm01.grid, kThreads);
  runCase(name, {sm01});
  snprintf(name, sizeof name, "(d) SM copy, both directions at once (%d / %d blocks x %d threads)",
           sm01.grid, sm10.grid, kThreads);
  runCase(name, {sm01, sm10});
  snprintf(name, sizeof name, "(e) SM write to peer, both directions at once (64 blocks x %d threads)",
           kThreads);
  runCase(name, {sm01r, sm10r});

  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaFree(src[d]));
    CK(cudaFree(dst[d]));
    CK(cudaStreamDestroy(streams[d]));
  }
  CK(cudaEventDestroy(evStart));
  CK(cudaEventDestroy(evEnd));
  CK(cudaEventDestroy(evDone1));
  return 0;
}
