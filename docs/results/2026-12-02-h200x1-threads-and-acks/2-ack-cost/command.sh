#!/usr/bin/env bash
# Device call 2 (session 25): gpu-bin = 31b1115 (a channel's send and receive links on
# different proxy threads). Loopback TCP ping-pong (one connection both ways, or one each
# way: what a pure ACK costs; gpu-bin/pp is scripts/tcp-ack-pingpong.c), the socket Net's
# socket_latency (gpu-bin/transports-tests: oxccl-transports' test binary), then GPU tests.
cd "$(dirname "$0")/.."
start=$SECONDS
mkdir -p $OUT/lat
for r in 1 2; do for m in 0 1 3; do for s in 20 76 1036; do gpu-bin/pp $m $s; done; done; done > $OUT/lat/pp.txt 2>&1
taskset -c 2,3 gpu-bin/pp 1 20 >> $OUT/lat/pp.txt 2>&1
timeout 120 gpu-bin/transports-tests socket_latency --ignored --nocapture > $OUT/lat/socket_latency.txt 2>&1
echo "latency at $((SECONDS-start)) s"
export OXCCL_TEST_ACROSS_RANKS=2
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=420 GPU_TEST_FILTERS="across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network one_host::the_executor_over_ll" timeout 430 bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
echo "tests at $((SECONDS-start)) s"
tar czf $OUT/lat.tgz -C $OUT lat && rm -rf $OUT/lat
