#!/usr/bin/env bash
# Call 3 (2026-11-23, new session): the host path splits a large ring or tree over up to
# four channels when it crosses the network. 1. staged all_reduce and sendrecv against
# NCCL's socket transport (gpu-bench.sh's staged part); 2. CPU socket Net under mpirun
# against Open MPI: 2 ranks all_reduce / all_gather / broadcast, 4 ranks all_reduce with
# ring, direct and the tuner's choice; 3. the staged GPU tests.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); bin=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
GPU_BENCH_COLLECTIVES=" " OUT=$res bash $bin/gpu-bench.sh; note "staged bench: exit $? ($SECONDS s)"
mpi() { # name, np, algo, collective, range...
  local name=$1 np=$2 algo=$3 c=$4; shift 4
  local pass=(-x NCCL_SHM_DISABLE=1 -x LD_LIBRARY_PATH)
  [[ -n $algo ]] && pass+=(-x "NCCL_ALGO=$algo")
  timeout 100 mpirun --allow-run-as-root -np "$np" --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "${pass[@]}" \
    "$bin/oxccl-perf" "$c" "$@" -n 10 -w 3 -c 1 --baseline mpi > "$res/cpu-net-$name.txt" 2>&1
  note "cpu $name: exit $? ($SECONDS s)"
}
for c in all_reduce all_gather broadcast; do mpi "$c-2" 2 "" "$c" -b 8 -e 64M -f 8; done
for a in ring direct ""; do mpi "all_reduce-4-${a:-tuner}" 4 "$a" all_reduce -b 64K -e 64M -f 4; done
export OXCCL_TEST_GPU=1
for t in ranks_on_separate_hosts_stage_through_host_memory staged_send_recv_groups a_staged_operation_stops_on_abort_and_when_its_peer_leaves; do
  start=$SECONDS
  timeout 150 "$bin/gpu_collectives" "$t" --exact --nocapture --test-threads 1 > "$res/$t.log" 2>&1
  note "$t: exit $? ($((SECONDS - start)) s)"
done
cat "$res/summary.txt"
