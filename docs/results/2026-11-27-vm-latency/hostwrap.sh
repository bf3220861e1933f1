#!/bin/sh
# Each rank of mpirun poses as a host of its own: oxccl's host path then goes over its socket Net.
export NCCL_HOSTID="host${OMPI_COMM_WORLD_RANK}"
exec "$@"
