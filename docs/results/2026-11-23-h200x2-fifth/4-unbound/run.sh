#!/usr/bin/env bash
# Call 4 (2026-11-23, new session): the CPU socket Net under mpirun again with --bind-to none
# (Open MPI binds each of 2 ranks to one core by default: a rank's executor and proxy
# threads then share it). 2 ranks all_reduce and broadcast; 4 ranks ring, direct, tuner.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); bin=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
mpi() { # name, np, algo, collective, range...
  local name=$1 np=$2 algo=$3 c=$4; shift 4
  local pass=(-x NCCL_SHM_DISABLE=1 -x LD_LIBRARY_PATH)
  [[ -n $algo ]] && pass+=(-x "NCCL_ALGO=$algo")
  timeout 100 mpirun --allow-run-as-root --bind-to none -np "$np" --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "${pass[@]}" \
    "$bin/oxccl-perf" "$c" "$@" -n 10 -w 3 -c 1 --baseline mpi > "$res/cpu-net-$name.txt" 2>&1
  note "cpu $name: exit $? ($SECONDS s)"
}
for c in all_reduce broadcast; do mpi "$c-2" 2 "" "$c" -b 8 -e 64M -f 8; done
for a in ring direct ""; do mpi "all_reduce-4-${a:-tuner}" 4 "$a" all_reduce -b 64K -e 64M -f 4; done
cat "$res/summary.txt"
