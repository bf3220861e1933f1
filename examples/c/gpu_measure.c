/* What a communicator costs on a GPU, and whether its results are right at every size:
 * one rank of a job, written against NCCL's own nccl.h, so that the same binary measures
 * NCCL and oxccl (whichever libnccl.so.2 comes first on LD_LIBRARY_PATH).
 *
 *   gpu_measure init     memory and time of ncclCommInitRank, then of a first all_reduce
 *   gpu_measure check B E F   every collective at sizes B, B*F, ... E bytes, each element checked
 *
 * Ranks are processes started by scripts/gpu-measure.sh, which sets RANK, NRANKS and
 * MEASURE_DIR (a directory shared by the job's ranks: the unique id and the barriers go
 * through files there), and optionally MEASURE_GPU (the device; default RANK % devices) and
 * NCCL_HOSTID (ranks posing as separate hosts). Each rank prints `key=value` lines.
 *
 * Memory is read with cudaMemGetInfo, which is device-wide: every rank's context and user
 * buffers exist before the first reading, all ranks read at the same barrier, so the drop
 * between two readings is what the communicators on that device took. ncclCommMemStats is
 * looked up at run time (dlsym): NCCL 2.28 may not have it.
 *
 * Build (on the GPU machine; scripts/gpu-measure.sh does it):
 *   gcc -O2 -std=gnu11 -I/usr/local/cuda/include gpu_measure.c -o gpu_measure \
 *       -L/usr/local/cuda/lib64 -lcudart -l:libnccl.so.2 -ldl
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CUDA(call)                                                                                  \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) fail("%s: %s", #call, cudaGetErrorString(e_));                          \
  } while (0)
#define NCCL(call)                                                                                  \
  do {                                                                                              \
    ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess) fail("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

static int rank, nranks;
static const char *dir;

static void fail(const char *format, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *format, ...) {
  va_list args;
  va_start(args, format);
  printf("rank=%d error=", rank);
  vprintf(format, args);
  printf("\n");
  va_end(args);
  fflush(stdout);
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* Every rank creates DIR/NAME.RANK, then waits (at most 300 s) until all NRANKS exist. */
static void barrier(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
  FILE *f = fopen(path, "w");
  if (!f) fail("creating %s: %s", path, strerror(errno));
  fclose(f);
  double deadline = now() + 300;
  for (int r = 0; r < nranks; r++) {
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, r);
    struct stat st;
    while (stat(path, &st) != 0) {
      if (now() > deadline) fail("barrier %s: rank %d never came", name, r);
      usleep(1000);
    }
  }
}

/* Rank 0 makes the id and writes it (to a temporary name, then renamed); the others wait. */
static ncclUniqueId share_id(void) {
  ncclUniqueId id;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/unique-id", dir);
  if (rank == 0) {
    NCCL(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0) fail("writing %s", tmp);
    if (rename(tmp, path) != 0) fail("renaming %s: %s", tmp, strerror(errno));
    return id;
  }
  double deadline = now() + 300;
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    if (now() > deadline) fail("no unique id in %s after 300 s", path);
    usleep(1000);
  }
}

static size_t free_bytes(void) {
  size_t free = 0, total = 0;
  CUDA(cudaMemGetInfo(&free, &total));
  return free;
}

/* ncclCommMemStats(comm, stat, &value), if the loaded library has it. */
typedef ncclResult_t (*MemStats)(ncclComm_t, int, uint64_t *);
static void print_mem_stats(ncclComm_t comm, const char *when) {
  MemStats stats = (MemStats)dlsym(RTLD_DEFAULT, "ncclCommMemStats");
  if (!stats) {
    printf("rank=%d memstats_%s=absent\n", rank, when);
    return;
  }
  /* NCCL's ncclCommMemStat_t: GpuMemSuspend 0, GpuMemSuspended 1, GpuMemPersist 2, GpuMemTotal 3. */
  const char *names[] = {"suspend", "suspended", "persist", "total"};
  for (int stat = 0; stat < 4; stat++) {
    uint64_t value = 0;
    ncclResult_t r = stats(comm, stat, &value);
    if (r == ncclSuccess)
      printf("rank=%d memstats_%s_%s=%llu\n", rank, when, names[stat], (unsigned long long)value);
    else
      printf("rank=%d memstats_%s_%s=error:%s\n", rank, when, names[stat], ncclGetErrorString(r));
  }
}

static void print_library(void) {
  Dl_info info;
  int version = 0;
  ncclGetVersion(&version);
  if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname)
    printf("rank=%d library=%s version=%d\n", rank, info.dli_fname, version);
  else
    printf("rank=%d library=? version=%d\n", rank, version);
}

static int measure_init(cudaStream_t stream) {
  /* User buffers exist before the first reading, so only the communicator is measured. */
  const size_t big = 64 << 20;
  float *send, *recv;
  CUDA(cudaMalloc((void **)&send, big));
  CUDA(cudaMalloc((void **)&recv, big));
  CUDA(cudaMemset(send, 0, big));
  CUDA(cudaDeviceSynchronize());
  barrier("ready");
  size_t before = free_bytes();
  barrier("read-before");
  ncclUniqueId id = share_id();
  ncclComm_t comm;
  double start = now();
  NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  double init_s = now() - start;
  barrier("initialized");
  size_t after_init = free_bytes();
  print_mem_stats(comm, "after_init");
  barrier("read-after-init");
  start = now();
  NCCL(ncclAllReduce(send, recv, 2, ncclFloat, ncclSum, comm, stream));
  CUDA(cudaStreamSynchronize(stream));
  double first_small_s = now() - start;
  start = now();
  NCCL(ncclAllReduce(send, recv, big / sizeof(float), ncclFloat, ncclSum, comm, stream));
  CUDA(cudaStreamSynchronize(stream));
  double first_big_s = now() - start;
  start = now();
  NCCL(ncclAllReduce(send, recv, 2, ncclFloat, ncclSum, comm, stream));
  CUDA(cudaStreamSynchronize(stream));
  double second_small_s = now() - start;
  barrier("collectives");
  size_t after_calls = free_bytes();
  print_mem_stats(comm, "after_calls");
  barrier("read-after-calls");
  NCCL(ncclCommDestroy(comm));
  /* oxccl frees a destroyed communicator's memory on a thread of its own: give it time. */
  sleep(2);
  barrier("destroyed");
  size_t after_destroy = free_bytes();
  printf("rank=%d init_s=%.6f first_allreduce_8B_s=%.6f first_allreduce_64MiB_s=%.6f second_allreduce_8B_s=%.6f\n", rank, init_s,
         first_small_s, first_big_s, second_small_s);
  printf("rank=%d device_free_before=%zu device_free_after_init=%zu device_free_after_calls=%zu device_free_after_destroy=%zu\n", rank,
         before, after_init, after_calls, after_destroy);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  return 0;
}

/* Rank r's input element i: small integers, so every sum is exact whatever the order. */
static float input(int r, size_t i) { return (float)((r + 1) * (int)(i % 251)); }

enum { ALL_REDUCE, ALL_REDUCE_IN_PLACE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, SENDRECV, COLLECTIVES };
static const char *collective_names[] = {"all_reduce", "all_reduce_in_place", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"};

/* The expected output element i (of the whole output buffer) on this rank; NAN: not written. */
static float expected(int collective, size_t i, size_t count) {
  int n = nranks;
  float ranks_sum = (float)(n * (n + 1) / 2);
  size_t part = count / n;
  switch (collective) {
    case ALL_REDUCE:
    case ALL_REDUCE_IN_PLACE: return ranks_sum * (float)(i % 251);
    case BROADCAST: return input(0, i);
    case REDUCE: return rank == 0 ? ranks_sum * (float)(i % 251) : NAN;
    case ALL_GATHER: return input((int)(i / part), i % part);
    case REDUCE_SCATTER: return ranks_sum * (float)((rank * part + i) % 251);
    case ALLTOALL: return input((int)(i / part), rank * part + i % part);
    case SENDRECV: return input((rank + n - 1) % n, i);
  }
  return NAN;
}

static int check(cudaStream_t stream, size_t min_bytes, size_t max_bytes, size_t factor) {
  float *send, *recv, *host;
  CUDA(cudaMalloc((void **)&send, max_bytes));
  CUDA(cudaMalloc((void **)&recv, max_bytes));
  host = malloc(max_bytes);
  if (!host) fail("no host memory for %zu bytes", max_bytes);
  ncclUniqueId id = share_id();
  ncclComm_t comm;
  NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  long total_wrong = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    for (int c = 0; c < COLLECTIVES; c++) {
      int split = c == ALL_GATHER || c == REDUCE_SCATTER || c == ALLTOALL;
      if (count == 0 || (split && count % nranks != 0)) continue;
      size_t part = count / nranks;
      size_t in_count = c == ALL_GATHER ? part : count;
      for (size_t i = 0; i < in_count; i++) host[i] = input(rank, i);
      CUDA(cudaMemcpy(send, host, in_count * sizeof(float), cudaMemcpyHostToDevice));
      CUDA(cudaMemset(recv, 0xff, bytes)); /* NaN everywhere: an element nobody wrote shows */
      if (c == ALL_REDUCE_IN_PLACE) CUDA(cudaMemcpy(recv, send, bytes, cudaMemcpyDeviceToDevice));
      /* A pageable copy may still be landing when cudaMemcpy returns, and the collective's
       * stream does not wait for the legacy stream: wait for both here. */
      CUDA(cudaDeviceSynchronize());
      switch (c) {
        case ALL_REDUCE: NCCL(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream)); break;
        case ALL_REDUCE_IN_PLACE:
          NCCL(ncclAllReduce(recv, recv, count, ncclFloat, ncclSum, comm, stream));
          break;
        case BROADCAST: NCCL(ncclBroadcast(send, recv, count, ncclFloat, 0, comm, stream)); break;
        case REDUCE: NCCL(ncclReduce(send, recv, count, ncclFloat, ncclSum, 0, comm, stream)); break;
        case ALL_GATHER: NCCL(ncclAllGather(send, recv, part, ncclFloat, comm, stream)); break;
        case REDUCE_SCATTER: NCCL(ncclReduceScatter(send, recv, part, ncclFloat, ncclSum, comm, stream)); break;
        case ALLTOALL:
          NCCL(ncclGroupStart());
          for (int peer = 0; peer < nranks; peer++) {
            NCCL(ncclSend(send + peer * part, part, ncclFloat, peer, comm, stream));
            NCCL(ncclRecv(recv + peer * part, part, ncclFloat, peer, comm, stream));
          }
          NCCL(ncclGroupEnd());
          break;
        case SENDRECV:
          NCCL(ncclGroupStart());
          NCCL(ncclSend(send, count, ncclFloat, (rank + 1) % nranks, comm, stream));
          NCCL(ncclRecv(recv, count, ncclFloat, (rank + nranks - 1) % nranks, comm, stream));
          NCCL(ncclGroupEnd());
          break;
      }
      CUDA(cudaStreamSynchronize(stream));
      size_t out_count = c == REDUCE_SCATTER ? part : count;
      CUDA(cudaMemcpy(host, recv, out_count * sizeof(float), cudaMemcpyDeviceToHost));
      long wrong = 0;
      size_t first_wrong = 0;
      for (size_t i = 0; i < out_count; i++) {
        float want = expected(c, i, count);
        if (want != want) continue; /* not written by this collective on this rank */
        if (host[i] != want && wrong++ == 0) first_wrong = i;
      }
      printf("rank=%d check=%s bytes=%zu wrong=%ld", rank, collective_names[c], bytes, wrong);
      if (wrong) printf(" first_wrong=%zu got=%g want=%g", first_wrong, host[first_wrong], expected(c, first_wrong, count));
      printf("\n");
      fflush(stdout);
      total_wrong += wrong;
    }
  }
  NCCL(ncclCommDestroy(comm));
  printf("rank=%d total_wrong=%ld\n", rank, total_wrong);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  free(host);
  return total_wrong ? 2 : 0;
}

static size_t parse_bytes(const char *text) {
  char *end;
  double value = strtod(text, &end);
  size_t scale = 1;
  if (*end == 'K') scale = 1 << 10;
  else if (*end == 'M') scale = 1 << 20;
  else if (*end == 'G') scale = 1 << 30;
  else if (*end != '\0') fail("bad size %s (a number with an optional K, M or G)", text);
  return (size_t)(value * scale);
}

int main(int argc, char **argv) {
  rank = env_int("RANK", 0);
  nranks = env_int("NRANKS", 1);
  dir = getenv("MEASURE_DIR");
  if (argc < 2 || !dir || nranks < 1 || rank < 0 || rank >= nranks)
    fail("usage: RANK=r NRANKS=n MEASURE_DIR=dir gpu_measure init | check MIN MAX FACTOR");
  int devices = 0;
  CUDA(cudaGetDeviceCount(&devices));
  int device = env_int("MEASURE_GPU", rank % devices);
  CUDA(cudaSetDevice(device));
  CUDA(cudaFree(0)); /* the context exists before anything is measured */
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const char *host = getenv("NCCL_HOSTID");
  printf("rank=%d nranks=%d device=%d hostid=%s\n", rank, nranks, device, host ? host : "-");
  print_library();
  int status;
  if (strcmp(argv[1], "init") == 0) {
    status = measure_init(stream);
  } else if (strcmp(argv[1], "check") == 0 && argc == 5) {
    size_t factor = parse_bytes(argv[4]);
    if (factor < 2) fail("factor must be at least 2");
    status = check(stream, parse_bytes(argv[2]), parse_bytes(argv[3]), factor);
  } else {
    fail("unknown mode %s (init, or check MIN MAX FACTOR)", argv[1]);
  }
  CUDA(cudaStreamDestroy(stream));
  printf("rank=%d done\n", rank);
  return status;
}
