#!/usr/bin/env bash
# Call 1 (2026-11-24): staged collectives in pieces. 1. staged all_reduce and broadcast
# against NCCL's socket transport, this session's binary (new) and the one before the
# change (old) alternating; 2. the staged GPU tests; 3. --call-stats on 2×H200.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
nvidia-smi topo -m > "$res/topo.txt" 2>&1; nproc >> "$res/topo.txt"
for round in 1 2; do
  for v in new old; do
    bin=oxccl-perf; [[ $v == old ]] && bin=old-oxccl-perf
    timeout 120 "$b/$bin" all_reduce -b 16 -e 256M -f 4 -n 20 -w 5 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/ar-$v-$round.txt" 2>&1
    note "all_reduce staged $v round $round: exit $? ($SECONDS s)"
  done
done
for v in new old; do
  bin=oxccl-perf; [[ $v == old ]] && bin=old-oxccl-perf
  timeout 100 "$b/$bin" broadcast -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/bc-$v.txt" 2>&1
  note "broadcast staged $v: exit $? ($SECONDS s)"
done
export OXCCL_TEST_GPU=1
for t in ranks_on_separate_hosts_stage_through_host_memory a_staged_operation_stops_on_abort_and_when_its_peer_leaves staged_send_recv_groups; do
  start=$SECONDS
  timeout 170 "$b/gpu_collectives" "$t" --exact --nocapture --test-threads 1 > "$res/$t.log" 2>&1
  note "$t: exit $? ($((SECONDS - start)) s)"
done
unset OXCCL_TEST_GPU
for c in all_reduce alltoall; do
  timeout 60 "$b/oxccl-perf" $c -b 1K -e 16M -f 4 -n 200 -w 5 -c 0 --gpus 2 --call-stats --baseline nccl > "$res/stats-$c.txt" 2>&1
  note "call stats $c: exit $? ($SECONDS s)"
done
cat "$res/summary.txt"
