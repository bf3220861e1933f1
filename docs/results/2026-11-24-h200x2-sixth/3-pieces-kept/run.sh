#!/usr/bin/env bash
# Call 3 (2026-11-24): staged pieces as kept (4 MiB pieces, inputs copied one piece
# ahead). 1. staged all_reduce, broadcast, reduce against NCCL's socket transport, new and
# old (before pieces) alternating; 2. the staged GPU tests.
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
for c in broadcast reduce; do
  for v in new old; do
    bin=oxccl-perf; [[ $v == old ]] && bin=old-oxccl-perf
    timeout 100 "$b/$bin" $c -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/$c-$v.txt" 2>&1
    note "$c staged $v: exit $? ($SECONDS s)"
  done
done
export OXCCL_TEST_GPU=1
for t in ranks_on_separate_hosts_stage_through_host_memory a_staged_operation_stops_on_abort_and_when_its_peer_leaves staged_send_recv_groups; do
  start=$SECONDS
  timeout 170 "$b/gpu_collectives" "$t" --exact --nocapture --test-threads 1 > "$res/$t.log" 2>&1
  note "$t: exit $? ($((SECONDS - start)) s)"
done
cat "$res/summary.txt"
