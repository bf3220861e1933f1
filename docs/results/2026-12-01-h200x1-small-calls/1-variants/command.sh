# Device call 1 (nvidia-h200), binaries of 82c27fd plus two temporary switches (removed
# before any commit): EXP_NO_MARK=1 (no event recorded after each launch) and
# EXP_OX_DEFINES=-DOX_EXP_PRELOAD (each thread of an LL step loads its local input lines
# before the step's wait), with scripts/gpu-net-bench.sh's nccl-env-<name> (4239649).
# gpu-bin/profiler/libnccl-profiler-example.so: NCCL's example profiler plugin
# (plugins/profiler/example of NVIDIA/nccl at 5067397c), compiled on the build machine with
# g++ -shared against its own headers; not part of the repository.
export NET_RANKS=2 NET_TESTS="all_gather reduce_scatter" NET_TIMEOUT=60 NET_ITERS=300
export NET_ENV_nomark="EXP_NO_MARK=1" NET_ENV_pre="EXP_OX_DEFINES=-DOX_EXP_PRELOAD" NET_ENV_both="EXP_NO_MARK=1 EXP_OX_DEFINES=-DOX_EXP_PRELOAD"
export NET_ENV_base2="EXP_NONE=1" NET_ENV_nomark2="$NET_ENV_nomark" NET_ENV_pre2="$NET_ENV_pre" NET_ENV_both2="$NET_ENV_both" NET_ENV_nccl2="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_MAX=32K NET_LIBS="oxccl oxccl-env-nomark oxccl-env-pre oxccl-env-both nccl oxccl-env-base2 oxccl-env-nomark2 oxccl-env-pre2 oxccl-env-both2 nccl-env-nccl2" timeout 300 bash gpu-bin/gpu-session.sh net   # -> ab/
mkdir -p /tmp/tl
export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/base" NET_ENV_tlb="OXCCL_KERNEL_TRACE=/tmp/tl/both $NET_ENV_both"
export NET_ENV_prof="NCCL_PROFILER_PLUGIN=$PWD/gpu-bin/profiler/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=66 NCCL_PROFILE_DUMP_FILE=/tmp/tl/nccl NCCL_PROFILE_COLL_POOL_SIZE=16384 NCCL_PROFILE_GROUP_POOL_SIZE=16384"
GPU_SESSION_TAG=tl NET_TESTS="all_gather reduce_scatter all_reduce" NET_MAX=128 NET_LIBS="oxccl-env-tl oxccl-env-tlb nccl-env-prof nccl" timeout 200 bash gpu-bin/gpu-session.sh net   # -> traced/
tar czf $OUT/tl.tgz -C /tmp tl   # -> timelines/
python3 scripts/kernel-gaps.py /tmp/tl/*   # -> kernel-gaps.txt (run again here on timelines/)
