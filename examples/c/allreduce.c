/*
 * A C program written for NCCL, run on oxccl's libnccl.so.2 with host memory: 4 ranks
 * under mpirun all-reduce a vector, exchange data around a ring in a group, use a
 * PreMulSum op, and check every result. Build and run (capi/tests/c_abi.rs does it in CI):
 *
 *   mpicc -I capi/include examples/c/allreduce.c -Ltarget/release -lnccl -o allreduce_c
 *   mpirun -np 4 ./allreduce_c
 */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(call)                                                                  \
  do {                                                                               \
    ncclResult_t r_ = (call);                                                        \
    if (r_ != ncclSuccess) {                                                         \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call,                   \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
    }                                                                                \
  } while (0)

#define EXPECT(cond, ...)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "rank %d: ", rank);                                            \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fprintf(stderr, "\n");                                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
    }                                                                                \
  } while (0)

int main(int argc, char** argv) {
  int size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, size, id, rank));
  int count_check, rank_check;
  CHECK(ncclCommCount(comm, &count_check));
  CHECK(ncclCommUserRank(comm, &rank_check));
  EXPECT(count_check == size && rank_check == rank, "count %d rank %d", count_check, rank_check);

  /* all_reduce: rank r contributes (r + 1) + i % 7. */
  size_t count = (1 << 20) + 3;
  float* send = malloc(count * sizeof(float));
  float* recv = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) send[i] = (float)(rank + 1 + i % 7);
  CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    float expected = (float)(size * (size + 1) / 2 + size * (i % 7));
    EXPECT(recv[i] == expected, "all_reduce element %zu is %f, expected %f", i, recv[i], expected);
  }

  /* A ring exchange in one group: receive from the previous rank, send to the next. */
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  CHECK(ncclGroupStart());
  CHECK(ncclRecv(recv, count, ncclFloat, prev, comm, NULL));
  CHECK(ncclSend(send, count, ncclFloat, next, comm, NULL));
  CHECK(ncclGroupEnd());
  for (size_t i = 0; i < count; i++) EXPECT(recv[i] == (float)(prev + 1 + i % 7), "ring element %zu", i);

  /* PreMulSum: every rank's ones times its own scalar (rank + 1). */
  double scalar = rank + 1;
  double ones[16], sums[16];
  for (int i = 0; i < 16; i++) ones[i] = 1.0;
  ncclRedOp_t premul;
  CHECK(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclDouble, ncclScalarHostImmediate, comm));
  CHECK(ncclAllReduce(ones, sums, 16, ncclDouble, premul, comm, NULL));
  CHECK(ncclRedOpDestroy(premul, comm));
  for (int i = 0; i < 16; i++) EXPECT(sums[i] == size * (size + 1) / 2, "premulsum element %d is %f", i, sums[i]);

  /* A caller error is refused, named, and leaves the communicator usable. */
  ncclResult_t bad = ncclAllReduce(send, recv, count, (ncclDataType_t)42, ncclSum, comm, NULL);
  EXPECT(bad == ncclInvalidArgument && strstr(ncclGetLastError(comm), "datatype"), "bad datatype gave %d: %s", bad, ncclGetLastError(comm));
  bad = ncclBroadcast(send, recv, count, ncclFloat, size, comm, NULL);
  EXPECT(bad == ncclInvalidArgument && strstr(ncclGetLastError(comm), "root"), "bad root gave %d: %s", bad, ncclGetLastError(comm));
  /* Rank 0's recv[0] came from rank size-1 in the ring: size. */
  CHECK(ncclBcast(recv, 4, ncclFloat, 0, comm, NULL));
  EXPECT(recv[0] == (float)size, "broadcast after a refused call: %f", recv[0]);

  ncclResult_t async;
  CHECK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "async error %d", async);
  int version;
  CHECK(ncclGetVersion(&version));
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  free(send);
  free(recv);
  printf("rank %d of %d: ok (oxccl as NCCL %d)\n", rank, size, version);
  MPI_Finalize();
  return 0;
}
