# This call ran ../1-h200x2-variants/command.sh (as gpu-bin/h1-a.sh) with three edits:
#   tag=${TAG:-h1a}; make ... -j 16;
#   NET_ENV_nh2="NCCL_SOCKET_NTHREADS=0 OXCCL_PROXY_THREADS=2" in place of NET_ENV_nh16;
# and these settings:
LAYOUTS="2x1 4x1" TESTS="all_reduce all_gather reduce_scatter broadcast alltoall sendrecv" LIBS="oxccl oxccl-proxy2 oxccl-env-nh2 oxccl-env-nohelp nccl-best" bash gpu-bin/h1-a.sh
