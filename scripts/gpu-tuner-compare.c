/* One rank of a job that runs the five tuned collectives at a range of sizes, for
 * scripts/gpu-tuner-compare.sh: with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING the library
 * (NCCL's or oxccl's libnccl.so.2) prints its choice per call on rank 0.
 *   gpu-tuner-compare <rank> <nranks> <id file> <min bytes> <max bytes>
 * Rank 0 writes the unique id to <id file>; the others wait for it (60 s at most). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call, what) do { int rc_ = (int)(call); if (rc_ != 0) { fprintf(stderr, "rank %d: %s failed: %d\n", rank, what, rc_); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc != 6) { fprintf(stderr, "usage: %s rank nranks idfile min max\n", argv[0]); return 2; }
  int rank = atoi(argv[1]), nranks = atoi(argv[2]);
  const char* idfile = argv[3];
  size_t lo = strtoull(argv[4], NULL, 0), hi = strtoull(argv[5], NULL, 0);
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", idfile);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1) { fprintf(stderr, "cannot write %s\n", tmp); return 1; }
    fclose(f);
    rename(tmp, idfile);
  } else {
    int waited = 0;
    FILE* f;
    while (!(f = fopen(idfile, "rb"))) {
      if (++waited > 6000) { fprintf(stderr, "rank %d: no id in %s after 60 s\n", rank, idfile); return 1; }
      usleep(10000);
    }
    if (fread(&id, sizeof id, 1, f) != 1) { fprintf(stderr, "short id file\n"); return 1; }
    fclose(f);
  }
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  CHECK(cudaSetDevice(rank % ndev), "cudaSetDevice");
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  size_t maxBytes = hi * (size_t)nranks;
  void *send, *recv;
  CHECK(cudaMalloc(&send, maxBytes), "cudaMalloc");
  CHECK(cudaMalloc(&recv, maxBytes), "cudaMalloc");
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
    size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
    CHECK(ncclBroadcast(send, recv, count, ncclFloat, 0, comm, stream), "ncclBroadcast");
    CHECK(ncclReduce(send, recv, count, ncclFloat, ncclSum, 0, comm, stream), "ncclReduce");
    CHECK(ncclAllGather(send, recv, count, ncclFloat, comm, stream), "ncclAllGather");
    CHECK(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, stream), "ncclReduceScatter");
    CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  CHECK(ncclCommDestroy(comm), "ncclCommDestroy");
  if (rank == 0) printf("done\n");
  return 0;
}
