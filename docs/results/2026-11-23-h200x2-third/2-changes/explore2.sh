#!/usr/bin/env bash
# Session experiments (2026-11-23, third visit), call 2: the changed code.
#  1. GPU tests (gpu, gpu_collectives with the new more_plans_than_the_cache_holds, gpu_calls)
#  2. sendrecv 64 KiB-1 GiB with the Simple send/recv spread over more channels, NCCL beside
#  3. staged (separate hosts) all_reduce and sendrecv, OXCCL_PROXY_THREADS=1 vs default
#  4. CPU socket Net under mpirun against Open MPI, OXCCL_PROXY_THREADS=1 vs default
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp "$0" "$res/"
note() { echo "$*" | tee -a "$res/summary.txt"; }
nproc > "$res/nproc.txt"
OUT=$res GPU_TESTS="gpu gpu_collectives gpu_calls" GPU_TEST_TIMEOUT=240 bash "$bin/gpu-run.sh" > /dev/null
note "tests done ($SECONDS s)"
timeout 120 "$bin/oxccl-perf" sendrecv -b 64K -e 1G -f 2 -n 30 -w 5 -c 1 --gpus 2 --baseline nccl > "$res/sr.txt" 2>&1
note "sr: exit $? ($SECONDS s)"
for t in 1 0; do
  for c in all_reduce sendrecv; do
    ((SECONDS < 520)) || break
    OXCCL_PROXY_THREADS=$t timeout 100 "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/staged-$c-threads$t.txt" 2>&1
    note "staged $c threads $t: exit $? ($SECONDS s)"
  done
done
for t in 1 0; do
  for c in sendrecv all_reduce; do
    ((SECONDS < 560)) || break
    OXCCL_PROXY_THREADS=$t NCCL_SHM_DISABLE=1 timeout 60 mpirun --allow-run-as-root -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE -x OXCCL_PROXY_THREADS -x LD_LIBRARY_PATH \
      "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --blocking 1 --baseline mpi > "$res/cpu-net-$c-threads$t.txt" 2>&1
    note "cpu net $c threads $t: exit $? ($SECONDS s)"
  done
done
cat "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
