# Device call 2, binaries of 82c27fd plus: a small plan's image (connections, bounds,
# steps; up to 768 bytes) passed in the kernel's arguments (DevArgs grew from 96 to 880
# bytes) and copied into shared memory by the block, with EXP_NO_INLINE=1 passing it by
# address as before; the cached head loaded with the window (kept, fc46ee2). The inline
# image was not committed.
export NET_TIMEOUT=60 NET_ITERS=200 NET_MAX=32K
export NET_ENV_noinl="EXP_NO_INLINE=1" NET_ENV_noinl2="EXP_NO_INLINE=1" NET_ENV_b2="EXP_NONE=1" NET_ENV_n2="EXP_NONE=1"
L="oxccl oxccl-env-noinl nccl oxccl-env-b2 oxccl-env-noinl2 nccl-env-n2"
GPU_SESSION_TAG=ab2 NET_RANKS=2 NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="$L" timeout 150 bash gpu-bin/gpu-session.sh net   # -> ab2/
GPU_SESSION_TAG=ab4 NET_RANKS=4 NET_TESTS="all_gather broadcast" NET_LIBS="$L" timeout 100 bash gpu-bin/gpu-session.sh net   # -> ab4/
mkdir -p /tmp/tl; export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/inl"
GPU_SESSION_TAG=tl NET_RANKS=2 NET_TESTS="all_gather" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 40 bash gpu-bin/gpu-session.sh net   # -> traced/, timelines/
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=230 GPU_TEST_FILTERS="--exact across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network across_hosts::the_tree_across_hosts_runs_on_the_network_kernels across_hosts::send_recv_groups_across_hosts_over_the_network one_host::every_route_matches_the_cpu_bit_for_bit one_host::the_executor_over_ll_between_gpus_matches_the_cpu_bit_for_bit one_host::the_kernel_timeline_stamps_every_step_in_order" timeout 240 bash gpu-bin/gpu-session.sh tests   # -> tests/ (cut at 230 s)
