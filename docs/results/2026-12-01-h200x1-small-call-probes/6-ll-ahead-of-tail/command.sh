#!/usr/bin/env bash
# Device call 6 (session 22): gpu-bin = e1b677e + the proxy sending an LL message once its
# lines show (ahead of the kernel's tail); gpu-bin/lib-base = e1b677e.
# Each run: 12 cycles (-N 12) of 50 iterations per size; compare medians over cycles.
cd "$(dirname "$0")/.."
export NET_TIMEOUT=90 NET_ITERS=50 NET_ARGS="-N 12" NET_MAX=32K
export NET_ENV_n2="EXP_NONE=2" NET_ENV_a2="EXP_NONE=2"
GPU_SESSION_TAG=ab2 NET_RANKS=2 NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="oxccl oxccl-lib-lib-base nccl oxccl-env-a2 oxccl-lib-lib-base2 nccl-env-n2" timeout 200 bash gpu-bin/gpu-session.sh net
GPU_SESSION_TAG=ab4 NET_RANKS=4 NET_TESTS="all_gather broadcast" NET_MAX=8K NET_LIBS="oxccl oxccl-lib-lib-base nccl" timeout 80 bash gpu-bin/gpu-session.sh net
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=250 GPU_TEST_FILTERS="across_hosts::" timeout 260 bash gpu-bin/gpu-session.sh tests
