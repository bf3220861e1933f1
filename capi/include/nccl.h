/*
 * oxccl's nccl.h: NCCL's C API (names, enum values, struct layouts, calling conventions)
 * served by oxccl's libnccl.so.2. Written for oxccl; the facts it follows are NCCL's
 * public API (see docs/CAPI.md).
 *
 * Compiles without any CUDA header: cudaStream_t is declared as an opaque pointer when
 * cuda_runtime.h has not been included before this header.
 *
 * Host memory: when the communicator runs on the host backend (the only backend of this
 * release), buffers are host pointers and the stream must be NULL; a call then completes
 * before it returns (inside ncclGroupStart/ncclGroupEnd, ncclGroupEnd completes the whole
 * group). A non-NULL stream is refused with ncclInvalidUsage until the GPU backend exists.
 *
 * Every call validates its arguments: a bad one returns ncclInvalidArgument (or
 * ncclInvalidUsage) and ncclGetLastError() names it; the communicator stays usable.
 * Calls oxccl does not implement yet return ncclInvalidUsage with a message, never crash.
 */
#ifndef OXCCL_NCCL_H_
#define OXCCL_NCCL_H_

#include <stddef.h>
#include <stdint.h>
#include <limits.h>

#if !defined(__CUDA_RUNTIME_H__) && !defined(CUDA_VERSION) && !defined(__DRIVER_TYPES_H__)
typedef struct CUstream_st* cudaStream_t;
#else
#include <cuda_runtime.h>
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22803

#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00
/* ncclCommSuspend: also release the memory the communicator re-creates on demand. */
#define NCCL_SUSPEND_MEM 0x01
/* oxccl extension (not in NCCL): with excludeRanksCount == 0, ncclCommShrink first makes
   the live ranks agree on the failed ones and excludes those (docs/CAPI.md). */
#define OXCCL_SHRINK_AGREE 0x100

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* Communicator configuration. A library reads only the first `size` bytes, so a config
 * from an older header is accepted. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                            \
  sizeof(ncclConfig_t),                  /* size */                         \
  0xcafebeef,                            /* magic */                        \
  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */           \
  NCCL_CONFIG_UNDEF_INT,                 /* blocking */                     \
  NCCL_CONFIG_UNDEF_INT,                 /* cgaClusterSize */               \
  NCCL_CONFIG_UNDEF_INT,                 /* minCTAs */                      \
  NCCL_CONFIG_UNDEF_INT,                 /* maxCTAs */                      \
  NCCL_CONFIG_UNDEF_PTR,                 /* netName */                      \
  NCCL_CONFIG_UNDEF_INT,                 /* splitShare */                   \
  NCCL_CONFIG_UNDEF_INT,                 /* trafficClass */                 \
  NCCL_CONFIG_UNDEF_PTR,                 /* commName */                     \
  NCCL_CONFIG_UNDEF_INT,                 /* collnetEnable */                \
  NCCL_CONFIG_UNDEF_INT,                 /* CTAPolicy */                    \
  NCCL_CONFIG_UNDEF_INT,                 /* shrinkShare */                  \
  NCCL_CONFIG_UNDEF_INT,                 /* nvlsCTAs */                     \
  NCCL_CONFIG_UNDEF_INT,                 /* nChannelsPerNetPeer */          \
  NCCL_CONFIG_UNDEF_INT,                 /* nvlinkCentricSched */           \
}

/* Versions, ids, errors. */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

/* Creation. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);

/* Lifetime and faults. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
/* Suspend refuses collectives and point-to-point calls (ncclInvalidUsage) until Resume;
   with NCCL_SUSPEND_MEM it releases the scratch buffer and the plan cache, and Resume
   allocates the scratch again. Host backend only for now: on the GPU backend both return
   ncclInvalidUsage (docs/CAPI.md). */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);

/* Memory statistics (on the host backend the bytes are host memory). */
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes held now that Suspend(NCCL_SUSPEND_MEM) releases */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* bytes held for the communicator's life (connection FIFOs) */
  ncclStatGpuMemTotal = 3      /* the sum of both */
} ncclCommMemStat_t;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);

/* Queries. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

/* Reduction ops. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Collectives. */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point. */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream);

/* Groups. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* Memory. On the host backend ncclMemAlloc returns host memory. */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);

/* The same functions under their profiling names. */
ncclResult_t pncclGetVersion(int* version);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);
const char* pncclGetErrorString(ncclResult_t result);
const char* pncclGetLastError(ncclComm_t comm);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemFree(void* ptr);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

#ifdef __cplusplus
}
#endif

#endif /* OXCCL_NCCL_H_ */
