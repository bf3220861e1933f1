// The GPU <-> CPU round trip through mapped pinned host memory: the floor under every hop of
// the NET transport (a kernel posts into a FIFO in host memory, the proxy answers there).
// The CPU writes i to a word the GPU polls; the GPU answers i in a word the CPU polls;
// 20000 rounds without, then with, a system fence after the GPU's store. On the GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/pp scripts/mapped-pingpong.cu && /tmp/pp
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void pong(volatile unsigned long long* to_gpu, volatile unsigned long long* to_cpu, int rounds, int fence) {
  for (int i = 1; i <= rounds; ++i) {
    while (*to_gpu < (unsigned long long)i) {}
    *to_cpu = i;
    if (fence) __threadfence_system();
  }
}

int main() {
  unsigned long long* h;
  if (cudaHostAlloc(&h, 4096, cudaHostAllocMapped) != cudaSuccess) { fprintf(stderr, "cudaHostAlloc failed\n"); return 1; }
  unsigned long long* d;
  cudaHostGetDevicePointer(&d, h, 0);
  for (int fence = 0; fence < 2; ++fence) {
    const int rounds = 20000;
    volatile unsigned long long* to_gpu = h;
    volatile unsigned long long* to_cpu = h + 8;  // another 64-byte line
    *to_gpu = 0;
    *to_cpu = 0;
    pong<<<1, 1>>>(d, d + 8, rounds, fence);
    std::vector<double> rtt;
    for (int i = 1; i <= rounds; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      *to_gpu = i;
      while (*to_cpu < (unsigned long long)i) {}
      rtt.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "the kernel failed\n"); return 1; }
    std::sort(rtt.begin(), rtt.end());
    printf("round trip CPU->GPU->CPU through mapped host memory (fence %d): median %.2f us, p10 %.2f, p90 %.2f, p99 %.2f\n", fence,
           rtt[rtt.size() / 2], rtt[rtt.size() / 10], rtt[rtt.size() * 9 / 10], rtt[rtt.size() * 99 / 100]);
  }
  return 0;
}
