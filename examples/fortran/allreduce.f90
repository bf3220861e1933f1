! A Fortran program on oxccl's libnccl.so.2 with host memory: 4 ranks under mpirun share a
! unique id over MPI_BCAST, all-reduce a vector and exchange data around a ring in a
! group, and check every result. Build and run (capi/tests/fortran.rs does it in CI):
!
!   mpifort -I<dir with nccl.mod> capi/include/nccl.f90 examples/fortran/allreduce.f90 \
!       -Ltarget/release -lnccl -o allreduce_f
!   mpirun -np 4 ./allreduce_f
program allreduce
  use iso_c_binding
  use mpi
  use nccl
  implicit none

  integer, parameter :: n = 100003
  type(ncclUniqueId) :: id
  type(c_ptr) :: comm
  integer :: ierr, rank, nranks, i, next, prev
  integer(c_int) :: rc, version
  real(c_float), allocatable, target :: send(:), recv(:)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  if (rank == 0) call check(ncclGetUniqueId(id), "ncclGetUniqueId")
  call MPI_Bcast(id, 128, MPI_BYTE, 0, MPI_COMM_WORLD, ierr)
  call check(ncclCommInitRank(comm, int(nranks, c_int), id, int(rank, c_int)), "ncclCommInitRank")

  allocate(send(n), recv(n))
  do i = 1, n
    send(i) = real(rank + 1 + mod(i, 7), c_float)
  end do
  call check(ncclAllReduce(c_loc(send), c_loc(recv), int(n, c_size_t), ncclFloat, ncclSum, comm, c_null_ptr), &
    "ncclAllReduce")
  do i = 1, n
    if (recv(i) /= real(nranks * (nranks + 1) / 2 + nranks * mod(i, 7), c_float)) then
      print *, "rank", rank, ": all_reduce element", i, "is", recv(i)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end do

  next = mod(rank + 1, nranks)
  prev = mod(rank + nranks - 1, nranks)
  call check(ncclGroupStart(), "ncclGroupStart")
  call check(ncclSend(c_loc(send), int(n, c_size_t), ncclFloat, int(next, c_int), comm, c_null_ptr), "ncclSend")
  call check(ncclRecv(c_loc(recv), int(n, c_size_t), ncclFloat, int(prev, c_int), comm, c_null_ptr), "ncclRecv")
  call check(ncclGroupEnd(), "ncclGroupEnd")
  do i = 1, n
    if (recv(i) /= real(prev + 1 + mod(i, 7), c_float)) then
      print *, "rank", rank, ": ring element", i, "is", recv(i)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end do

  ! A bad datatype is refused with ncclInvalidArgument and a message naming it.
  rc = ncclAllReduce(c_loc(send), c_loc(recv), int(n, c_size_t), 42_c_int, ncclSum, comm, c_null_ptr)
  if (rc /= ncclInvalidArgument .or. index(nccl_string(ncclGetLastError(comm)), "datatype") == 0) then
    print *, "rank", rank, ": bad datatype gave", rc
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if

  call check(ncclGetVersion(version), "ncclGetVersion")
  call check(ncclCommFinalize(comm), "ncclCommFinalize")
  call check(ncclCommDestroy(comm), "ncclCommDestroy")
  print '(a,i0,a,i0,a,i0,a)', "rank ", rank, " of ", nranks, ": ok (Fortran, oxccl as NCCL ", version, ")"
  call MPI_Finalize(ierr)

contains

  subroutine check(result, what)
    integer(c_int), intent(in) :: result
    character(len=*), intent(in) :: what
    integer :: e
    if (result /= ncclSuccess) then
      print *, "rank", rank, ": ", what, " failed: ", nccl_string(ncclGetErrorString(result)), ": ", &
        nccl_string(ncclGetLastError(c_null_ptr))
      call MPI_Abort(MPI_COMM_WORLD, 1, e)
    end if
  end subroutine check

end program allreduce
