#!/usr/bin/env bash
# Call 2 (2026-11-24): staged pieces, sweep of piece size, most pieces and copy look-ahead
# (temporary knobs OXX_PIECE, OXX_MAXP, OXX_AHEAD); old = binary before pieces.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
M=$((1<<20))
variants=("old:" "p4-m8-all:OXX_PIECE=$((4*M)) OXX_MAXP=8 OXX_AHEAD=1000" "p4-m8-a1:OXX_PIECE=$((4*M)) OXX_MAXP=8 OXX_AHEAD=1"
  "p4-all:OXX_PIECE=$((4*M)) OXX_MAXP=100000 OXX_AHEAD=1000" "p4-a1:OXX_PIECE=$((4*M)) OXX_MAXP=100000 OXX_AHEAD=1"
  "p2-a1:OXX_PIECE=$((2*M)) OXX_MAXP=100000 OXX_AHEAD=1" "p8-a1:OXX_PIECE=$((8*M)) OXX_MAXP=100000 OXX_AHEAD=1")
for round in 1 2; do
  for v in "${variants[@]}"; do
    name=${v%%:*}; envs=${v#*:}
    bin=oxccl-perf; [[ $name == old ]] && bin=old-oxccl-perf
    # shellcheck disable=SC2086
    env $envs timeout 60 "$b/$bin" all_reduce -b 16M -e 256M -f 4 -n 10 -w 3 -c 0 --gpus 2 --separate-hosts --baseline nccl > "$res/ar-$name-$round.txt" 2>&1
    note "all_reduce $name round $round: exit $? ($SECONDS s)"
  done
done
for v in "${variants[@]:0:2}" "${variants[@]:4:1}"; do
  name=${v%%:*}; envs=${v#*:}
  bin=oxccl-perf; [[ $name == old ]] && bin=old-oxccl-perf
  # shellcheck disable=SC2086
  env $envs timeout 60 "$b/$bin" broadcast -b 16M -e 256M -f 4 -n 10 -w 3 -c 0 --gpus 2 --separate-hosts --baseline nccl > "$res/bc-$name.txt" 2>&1
  note "broadcast $name: exit $? ($SECONDS s)"
done
timeout 100 mpirun --allow-run-as-root --bind-to none -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE=1 -x LD_LIBRARY_PATH \
    "$b/oxccl-perf" all_reduce -b 1M -e 256M -f 4 -n 10 -w 3 -c 0 --blocking 1 --baseline mpi > "$res/cpu-net-all_reduce-2.txt" 2>&1
note "cpu all_reduce: exit $? ($SECONDS s)"
cat "$res/summary.txt"
