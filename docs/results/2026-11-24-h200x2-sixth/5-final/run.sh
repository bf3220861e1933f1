#!/usr/bin/env bash
# Call 5 (2026-11-24): the final code (all_reduce and broadcast in pieces, reduce whole):
# staged all_reduce, broadcast and reduce new and old once more, and the staged GPU tests.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
for c in all_reduce broadcast reduce; do
  for v in old new; do
    bin=oxccl-perf; [[ $v == old ]] && bin=old-oxccl-perf
    timeout 100 "$b/$bin" $c -b 4M -e 256M -f 4 -n 20 -w 5 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/$c-$v.txt" 2>&1
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
