#!/usr/bin/env bash
# Call 5 (2026-11-23, new session): two ranks' all_reduce in one hop. 1. staged all_reduce
# and sendrecv against NCCL's socket transport; 2. CPU socket Net, 2 ranks under mpirun,
# all_reduce unbound and with Open MPI's default binding; 3. the staged GPU tests.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); bin=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
GPU_BENCH_COLLECTIVES=" " OUT=$res bash $bin/gpu-bench.sh; note "staged bench: exit $? ($SECONDS s)"
for bind in none core; do
  timeout 100 mpirun --allow-run-as-root --bind-to $bind -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE=1 -x LD_LIBRARY_PATH \
    "$bin/oxccl-perf" all_reduce -b 8 -e 64M -f 8 -n 50 -w 5 -c 1 --blocking 1 --baseline mpi > "$res/cpu-net-all_reduce-2-bind-$bind.txt" 2>&1
  note "cpu all_reduce bind $bind: exit $? ($SECONDS s)"
done
export OXCCL_TEST_GPU=1
for t in ranks_on_separate_hosts_stage_through_host_memory a_staged_operation_stops_on_abort_and_when_its_peer_leaves; do
  start=$SECONDS
  timeout 150 "$bin/gpu_collectives" "$t" --exact --nocapture --test-threads 1 > "$res/$t.log" 2>&1
  note "$t: exit $? ($((SECONDS - start)) s)"
done
cat "$res/summary.txt"
