! oxccl's Fortran interface to NCCL's C API (libnccl.so.2 and capi/include/nccl.h), for
! gfortran and any Fortran 2008 compiler with iso_c_binding. Generated from nccl.h once and
! kept in step by capi/tests/fortran.rs, which checks that every C function has an
! interface here.
!
! Handles (ncclComm_t, cudaStream_t, buffers) are type(c_ptr): pass c_loc(array) for a
! buffer and c_null_ptr for the stream on the host backend. ncclUniqueId is a bind(c) type
! of 128 bytes that can be sent with MPI_BCAST as MPI_BYTE. Results are integer(c_int),
! compared with the named constants below. Strings (ncclGetErrorString, ncclGetLastError)
! come back as type(c_ptr) to a NUL-terminated C string; nccl_string converts one.
module nccl
  use iso_c_binding
  implicit none

  integer(c_int), parameter :: ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, &
    ncclInternalError = 3, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, &
    ncclInProgress = 7, ncclTimeout = 8

  integer(c_int), parameter :: ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, &
    ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, &
    ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9, ncclFloat8e4m3 = 10, &
    ncclFloat8e5m2 = 11

  integer(c_int), parameter :: ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4

  integer(c_int), parameter :: ncclScalarDevice = 0, ncclScalarHostImmediate = 1

  integer(c_int), parameter :: NCCL_SPLIT_NOCOLOR = -1
  integer(c_int), parameter :: NCCL_SUSPEND_MEM = 1
  integer(c_int), parameter :: ncclStatGpuMemSuspend = 0, ncclStatGpuMemSuspended = 1, &
    ncclStatGpuMemPersist = 2, ncclStatGpuMemTotal = 3

  type, bind(c) :: ncclUniqueId
    character(kind=c_char) :: internal(128)
  end type ncclUniqueId

  interface

    function ncclGetVersion(version) bind(c, name="ncclGetVersion")
      import
      integer(c_int) :: ncclGetVersion
      integer(c_int), intent(out) :: version
    end function ncclGetVersion

    function ncclGetUniqueId(uniqueId) bind(c, name="ncclGetUniqueId")
      import
      integer(c_int) :: ncclGetUniqueId
      type(ncclUniqueId) :: uniqueId
    end function ncclGetUniqueId

    function ncclGetErrorString(result) bind(c, name="ncclGetErrorString")
      import
      type(c_ptr) :: ncclGetErrorString
      integer(c_int), value :: result
    end function ncclGetErrorString

    function ncclGetLastError(comm) bind(c, name="ncclGetLastError")
      import
      type(c_ptr) :: ncclGetLastError
      type(c_ptr), value :: comm
    end function ncclGetLastError

    function ncclCommInitRank(comm, nranks, commId, rank) bind(c, name="ncclCommInitRank")
      import
      integer(c_int) :: ncclCommInitRank
      type(c_ptr), intent(out) :: comm
      integer(c_int), value :: nranks
      type(ncclUniqueId), value :: commId
      integer(c_int), value :: rank
    end function ncclCommInitRank

    function ncclCommInitRankConfig(comm, nranks, commId, rank, config) bind(c, name="ncclCommInitRankConfig")
      import
      integer(c_int) :: ncclCommInitRankConfig
      type(c_ptr), intent(out) :: comm
      integer(c_int), value :: nranks
      type(ncclUniqueId), value :: commId
      integer(c_int), value :: rank
      type(c_ptr), value :: config
    end function ncclCommInitRankConfig

    function ncclCommInitRankScalable(newcomm, nranks, myrank, nId, commIds, config) bind(c, name="ncclCommInitRankScalable")
      import
      integer(c_int) :: ncclCommInitRankScalable
      type(c_ptr), intent(out) :: newcomm
      integer(c_int), value :: nranks
      integer(c_int), value :: myrank
      integer(c_int), value :: nId
      type(ncclUniqueId) :: commIds(*)
      type(c_ptr), value :: config
    end function ncclCommInitRankScalable

    function ncclCommInitAll(comm, ndev, devlist) bind(c, name="ncclCommInitAll")
      import
      integer(c_int) :: ncclCommInitAll
      type(c_ptr) :: comm(*)
      integer(c_int), value :: ndev
      type(c_ptr), value :: devlist
    end function ncclCommInitAll

    function ncclCommSplit(comm, color, key, newcomm, config) bind(c, name="ncclCommSplit")
      import
      integer(c_int) :: ncclCommSplit
      type(c_ptr), value :: comm
      integer(c_int), value :: color
      integer(c_int), value :: key
      type(c_ptr), intent(out) :: newcomm
      type(c_ptr), value :: config
    end function ncclCommSplit

    function ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags) bind(c, name="ncclCommShrink")
      import
      integer(c_int) :: ncclCommShrink
      type(c_ptr), value :: comm
      type(c_ptr), value :: excludeRanksList
      integer(c_int), value :: excludeRanksCount
      type(c_ptr), intent(out) :: newcomm
      type(c_ptr), value :: config
      integer(c_int), value :: shrinkFlags
    end function ncclCommShrink

    function ncclCommGrow(comm, nRanks, uniqueId, rank, newcomm, config) bind(c, name="ncclCommGrow")
      import
      integer(c_int) :: ncclCommGrow
      type(c_ptr), value :: comm
      integer(c_int), value :: nRanks
      type(ncclUniqueId) :: uniqueId
      integer(c_int), value :: rank
      type(c_ptr), intent(out) :: newcomm
      type(c_ptr), value :: config
    end function ncclCommGrow

    function ncclCommGetUniqueId(comm, uniqueId) bind(c, name="ncclCommGetUniqueId")
      import
      integer(c_int) :: ncclCommGetUniqueId
      type(c_ptr), value :: comm
      type(ncclUniqueId) :: uniqueId
    end function ncclCommGetUniqueId

    function ncclCommFinalize(comm) bind(c, name="ncclCommFinalize")
      import
      integer(c_int) :: ncclCommFinalize
      type(c_ptr), value :: comm
    end function ncclCommFinalize

    function ncclCommDestroy(comm) bind(c, name="ncclCommDestroy")
      import
      integer(c_int) :: ncclCommDestroy
      type(c_ptr), value :: comm
    end function ncclCommDestroy

    function ncclCommAbort(comm) bind(c, name="ncclCommAbort")
      import
      integer(c_int) :: ncclCommAbort
      type(c_ptr), value :: comm
    end function ncclCommAbort

    function ncclCommRevoke(comm, revokeFlags) bind(c, name="ncclCommRevoke")
      import
      integer(c_int) :: ncclCommRevoke
      type(c_ptr), value :: comm
      integer(c_int), value :: revokeFlags
    end function ncclCommRevoke

    function ncclCommGetAsyncError(comm, asyncError) bind(c, name="ncclCommGetAsyncError")
      import
      integer(c_int) :: ncclCommGetAsyncError
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: asyncError
    end function ncclCommGetAsyncError

    function ncclCommSuspend(comm, flags) bind(c, name="ncclCommSuspend")
      import
      integer(c_int) :: ncclCommSuspend
      type(c_ptr), value :: comm
      integer(c_int), value :: flags
    end function ncclCommSuspend

    function ncclCommResume(comm) bind(c, name="ncclCommResume")
      import
      integer(c_int) :: ncclCommResume
      type(c_ptr), value :: comm
    end function ncclCommResume

    function ncclCommMemStats(comm, stat, value) bind(c, name="ncclCommMemStats")
      import
      integer(c_int) :: ncclCommMemStats
      type(c_ptr), value :: comm
      integer(c_int), value :: stat
      integer(c_int64_t), intent(out) :: value
    end function ncclCommMemStats

    function ncclCommCount(comm, count) bind(c, name="ncclCommCount")
      import
      integer(c_int) :: ncclCommCount
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: count
    end function ncclCommCount

    function ncclCommCuDevice(comm, device) bind(c, name="ncclCommCuDevice")
      import
      integer(c_int) :: ncclCommCuDevice
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: device
    end function ncclCommCuDevice

    function ncclCommUserRank(comm, rank) bind(c, name="ncclCommUserRank")
      import
      integer(c_int) :: ncclCommUserRank
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: rank
    end function ncclCommUserRank

    function ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, comm) bind(c, name="ncclRedOpCreatePreMulSum")
      import
      integer(c_int) :: ncclRedOpCreatePreMulSum
      integer(c_int), intent(out) :: op
      type(c_ptr), value :: scalar
      integer(c_int), value :: datatype
      integer(c_int), value :: residence
      type(c_ptr), value :: comm
    end function ncclRedOpCreatePreMulSum

    function ncclRedOpDestroy(op, comm) bind(c, name="ncclRedOpDestroy")
      import
      integer(c_int) :: ncclRedOpDestroy
      integer(c_int), value :: op
      type(c_ptr), value :: comm
    end function ncclRedOpDestroy

    function ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream) bind(c, name="ncclReduce")
      import
      integer(c_int) :: ncclReduce
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: op
      integer(c_int), value :: root
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclReduce

    function ncclBcast(buff, count, datatype, root, comm, stream) bind(c, name="ncclBcast")
      import
      integer(c_int) :: ncclBcast
      type(c_ptr), value :: buff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: root
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclBcast

    function ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream) bind(c, name="ncclBroadcast")
      import
      integer(c_int) :: ncclBroadcast
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: root
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclBroadcast

    function ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream) bind(c, name="ncclAllReduce")
      import
      integer(c_int) :: ncclAllReduce
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: op
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclAllReduce

    function ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream) bind(c, name="ncclReduceScatter")
      import
      integer(c_int) :: ncclReduceScatter
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: recvcount
      integer(c_int), value :: datatype
      integer(c_int), value :: op
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclReduceScatter

    function ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream) bind(c, name="ncclAllGather")
      import
      integer(c_int) :: ncclAllGather
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: sendcount
      integer(c_int), value :: datatype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclAllGather

    function ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream) bind(c, name="ncclAlltoAll")
      import
      integer(c_int) :: ncclAlltoAll
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclAlltoAll

    function ncclGather(sendbuff, recvbuff, count, datatype, root, comm, stream) bind(c, name="ncclGather")
      import
      integer(c_int) :: ncclGather
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: root
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclGather

    function ncclScatter(sendbuff, recvbuff, count, datatype, root, comm, stream) bind(c, name="ncclScatter")
      import
      integer(c_int) :: ncclScatter
      type(c_ptr), value :: sendbuff
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: root
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclScatter

    function ncclSend(sendbuff, count, datatype, peer, comm, stream) bind(c, name="ncclSend")
      import
      integer(c_int) :: ncclSend
      type(c_ptr), value :: sendbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: peer
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclSend

    function ncclRecv(recvbuff, count, datatype, peer, comm, stream) bind(c, name="ncclRecv")
      import
      integer(c_int) :: ncclRecv
      type(c_ptr), value :: recvbuff
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int), value :: peer
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
    end function ncclRecv

    function ncclGroupStart() bind(c, name="ncclGroupStart")
      import
      integer(c_int) :: ncclGroupStart
    end function ncclGroupStart

    function ncclGroupEnd() bind(c, name="ncclGroupEnd")
      import
      integer(c_int) :: ncclGroupEnd
    end function ncclGroupEnd

    function ncclMemAlloc(ptr, size) bind(c, name="ncclMemAlloc")
      import
      integer(c_int) :: ncclMemAlloc
      type(c_ptr), intent(out) :: ptr
      integer(c_size_t), value :: size
    end function ncclMemAlloc

    function ncclMemFree(ptr) bind(c, name="ncclMemFree")
      import
      integer(c_int) :: ncclMemFree
      type(c_ptr), value :: ptr
    end function ncclMemFree

    function ncclCommRegister(comm, buff, size, handle) bind(c, name="ncclCommRegister")
      import
      integer(c_int) :: ncclCommRegister
      type(c_ptr), value :: comm
      type(c_ptr), value :: buff
      integer(c_size_t), value :: size
      type(c_ptr), intent(out) :: handle
    end function ncclCommRegister

    function ncclCommDeregister(comm, handle) bind(c, name="ncclCommDeregister")
      import
      integer(c_int) :: ncclCommDeregister
      type(c_ptr), value :: comm
      type(c_ptr), value :: handle
    end function ncclCommDeregister

  end interface

contains

  ! A Fortran string from a C string (ncclGetErrorString, ncclGetLastError).
  function nccl_string(cstr) result(text)
    type(c_ptr), intent(in) :: cstr
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    interface
      function strlen(s) bind(c, name="strlen")
        import
        type(c_ptr), value :: s
        integer(c_size_t) :: strlen
      end function strlen
    end interface
    if (.not. c_associated(cstr)) then
      text = ""
      return
    end if
    n = int(strlen(cstr))
    call c_f_pointer(cstr, chars, [n])
    allocate(character(len=n) :: text)
    text = transfer(chars(1:n), text)
  end function nccl_string

end module nccl
