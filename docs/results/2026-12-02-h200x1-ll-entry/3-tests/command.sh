#!/usr/bin/env bash
# Device call 3 (session 24): gpu-bin = the executor's LL entry and the slot by mask, as
# committed (no experiment switches). GPU tests of the change.
cd "$(dirname "$0")/.."
start=$SECONDS
export OXCCL_TEST_ACROSS_RANKS=2
GPU_SESSION_TAG=tests1 GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=300 GPU_TEST_FILTERS="across_hosts::small_calls across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network across_hosts::a_kernel_waiting_across_hosts" timeout 310 bash gpu-bin/gpu-session.sh tests
echo "tests1 at $((SECONDS-start)) s"
GPU_SESSION_TAG=tests2 GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=240 GPU_TEST_FILTERS="one_host::the_executor_over_ll one_host::the_kernel_timeline one_host::every_route" timeout 245 bash gpu-bin/gpu-session.sh tests
echo "tests2 at $((SECONDS-start)) s"
