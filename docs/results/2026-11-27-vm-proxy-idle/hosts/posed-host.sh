#!/usr/bin/env bash
export NCCL_HOSTID="host$((OMPI_COMM_WORLD_RANK * 2 / OMPI_COMM_WORLD_SIZE))"
exec "$@"
