# Device call 3: gpu-bin/lib = call 2's build plus the fused send-and-copy step (COPY_SEND);
# gpu-bin/lib-head and lib-head2 = libnccl.so.2 of 82c27fd (this session's starting point).
export NET_TIMEOUT=60 NET_ITERS=200 NET_MAX=32K NET_ENV_b2="EXP_NONE=1" NET_ENV_n2="EXP_NONE=1"
GPU_SESSION_TAG=ab2 NET_RANKS=2 NET_TESTS="all_gather reduce_scatter all_reduce broadcast" NET_LIBS="oxccl oxccl-lib-lib-head nccl oxccl-env-b2 oxccl-lib-lib-head2 nccl-env-n2" timeout 200 bash gpu-bin/gpu-session.sh net   # -> ab2/
GPU_SESSION_TAG=ab4 NET_RANKS=4 NET_TESTS="all_gather reduce_scatter broadcast" NET_LIBS="oxccl oxccl-lib-lib-head nccl" timeout 120 bash gpu-bin/gpu-session.sh net   # -> ab4/
GPU_SESSION_TAG=big NET_RANKS=2 NET_MAX=32M NET_ITERS=20 NET_TESTS="all_gather all_reduce" NET_LIBS="oxccl oxccl-lib-lib-head" timeout 120 bash gpu-bin/gpu-session.sh net   # -> big/
