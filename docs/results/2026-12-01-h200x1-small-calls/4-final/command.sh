# Device call 4: gpu-bin = fc46ee2 (the fused step and the cached head from the window; no
# inline image); lib-head, lib-head2 = 82c27fd.
export NET_TIMEOUT=60 NET_ITERS=200 NET_MAX=32K NET_ENV_b2="EXP_NONE=1"
GPU_SESSION_TAG=ab2 NET_RANKS=2 NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="oxccl oxccl-lib-lib-head nccl oxccl-env-b2 oxccl-lib-lib-head2" timeout 130 bash gpu-bin/gpu-session.sh net   # -> ab2/
GPU_SESSION_TAG=ab4 NET_RANKS=4 NET_TESTS="broadcast all_gather" NET_LIBS="oxccl oxccl-lib-lib-head oxccl-env-b2 oxccl-lib-lib-head2" timeout 60 bash gpu-bin/gpu-session.sh net   # -> ab4/
GPU_SESSION_TAG=plug NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 90 bash gpu-bin/gpu-session.sh netplugin   # -> netplugin/
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=280 GPU_TEST_FILTERS="--exact across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network one_host::the_kernel_timeline_stamps_every_step_in_order one_host::every_route_matches_the_cpu_bit_for_bit" timeout 285 bash gpu-bin/gpu-session.sh tests   # -> tests/
