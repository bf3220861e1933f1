#!/usr/bin/env bash
# One call on the GPU machine (the device tool returns at most 8 files, so everything is
# packed into $OUT/results.tgz, again after each stage): runs the stages named as arguments, in order, from the
# repository root with gpu-bin/ (scripts/gpu-build.sh) carried along.
#   tests         gpu-bin's GPU test binaries (GPU_TESTS, default gpu_collectives gpu_calls)
#   bench         gpu-bench.sh: oxccl-perf against NCCL for every collective
#                 (GPU_BENCH_COLLECTIVES narrows them)
#   pytorch       examples/pytorch/check_collectives.py with oxccl's libnccl.so.2 preloaded
#   net           builds .nccl-tests/ with MPI and runs gpu-net-bench.sh: ranks posing as
#                 hosts on the GPUs there are (MPS), oxccl against NCCL's socket transport
#   tuner         gpu-tuner-compare.sh: the project's tuner plugin in NCCL 2.28 and in oxccl
#                 (and oxccl-topo's NCCL model) choose alike
#   nccl-tests    builds .nccl-tests/ (NVIDIA/nccl-tests, copied there, git-ignored) with and
#                 without MPI and runs every test with oxccl and with NCCL: -g 2 in one
#                 process, and one process per GPU under mpirun
#   netplugin     builds .nccl-tests/ with MPI (if not built) and runs gpu-netplugin.sh: the
#                 machine's NCCL over libnccl-net-oxccl.so against NCCL over its own socket
#                 transport, two ranks posing as hosts on one GPU under MPS, once per socket
#                 setting (NETPLUGIN_SOCKET_SETTINGS, default "default 4x4": both nets with
#                 NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD unset, then 4 and 4), with
#                 the ratios per setting in summary.txt (NETPLUGIN_TESTS, NETPLUGIN_ROUNDS;
#                 NETPLUGIN_PYTORCH=1: PyTorch's collectives over both nets first)
#   timeline      oxccl-perf on every GPU there with the executor kernel's timeline kept
#                 (OXCCL_KERNEL_TRACE): TIMELINE_COLLECTIVES (default all_reduce broadcast)
#                 from TIMELINE_MIN to TIMELINE_MAX (512K, 2M), each rank's file under timeline/
# NVLink multicast stays off; GPU clocks and modes are never touched.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
note() { echo "$*" | tee -a "$res/summary.txt"; }
# GPU_SESSION_TAG names the pack (results-<tag>.tgz), so that several sessions in one call
# (each with its own settings) return side by side.
mkdir -p "${OUT:-$root/gpu-out}"
pack="${OUT:-$root/gpu-out}/results${GPU_SESSION_TAG:+-$GPU_SESSION_TAG}.tgz"
for stage in "$@"; do
  start=$SECONDS
  case $stage in
    tests)
      OUT=$res GPU_TESTS="${GPU_TESTS:-gpu_collectives gpu_calls}" GPU_TEST_TIMEOUT="${GPU_TEST_TIMEOUT:-300}" bash "$bin/gpu-run.sh" > /dev/null
      ;;
    bench)
      OUT=$res bash "$bin/gpu-bench.sh" > /dev/null
      ;;
    tuner)
      OUT=$res/tuner bash "$root/scripts/gpu-tuner-compare.sh" > /dev/null
      note "tuner: exit $? ($(tr '\n' ';' < "$res/tuner/compare.txt"))"
      ;;
    pytorch)
      LD_PRELOAD="$bin/lib/libnccl.so.2" timeout 180 python3 "$root/examples/pytorch/check_collectives.py" > "$res/pytorch-oxccl.txt" 2>&1
      note "pytorch: exit $?"
      ;;
    net)
      nt="$root/.nccl-tests"
      [[ -x $nt/build-mpi/all_reduce_perf ]] || make -C "$nt" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME="$CUDA_HOME" NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt/build-mpi" -j 16 > "$res/nccl-tests-build.txt" 2>&1
      OUT=$res bash "$bin/gpu-net-bench.sh" "$nt/build-mpi" > /dev/null
      ;;
    nccl-tests)
      nt="$root/.nccl-tests"
      gencode="-gencode=arch=compute_90,code=sm_90"
      make -C "$nt" MPI=0 CUDA_HOME="$CUDA_HOME" NCCL_HOME=/usr NVCC_GENCODE="$gencode" BUILDDIR="$nt/build" -j 32 > "$res/nccl-tests-build.txt" 2>&1
      make -C "$nt" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME="$CUDA_HOME" NCCL_HOME=/usr NVCC_GENCODE="$gencode" BUILDDIR="$nt/build-mpi" -j 32 >> "$res/nccl-tests-build.txt" 2>&1
      OUT=$res NCCL_TESTS_MAX="${NCCL_TESTS_MAX:-64M}" bash "$bin/gpu-nccl-tests.sh" "$nt/build" > /dev/null
      OUT=$res NCCL_TESTS_MAX="${NCCL_TESTS_MAX:-64M}" NCCL_TESTS_MPI=1 bash "$bin/gpu-nccl-tests.sh" "$nt/build-mpi" > /dev/null
      ;;
    netplugin)
      nt="$root/.nccl-tests"
      make -C "$nt" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME="$CUDA_HOME" NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt/build-mpi" -j 32 > "$res/netplugin-build.txt" 2>&1
      OUT=$res bash "$bin/gpu-netplugin.sh" "$nt/build-mpi" > /dev/null
      note "netplugin: exit $?"
      ;;
    timeline)
      mkdir -p "$res/timeline"
      gpus=$(nvidia-smi -L | wc -l)
      for c in ${TIMELINE_COLLECTIVES:-all_reduce broadcast}; do
        OXCCL_KERNEL_TRACE="$res/timeline/$c" timeout 120 "$bin/oxccl-perf" "$c" -b "${TIMELINE_MIN:-512K}" -e "${TIMELINE_MAX:-2M}" -f 2 -n 30 -w 5 -c 0 --gpus "$gpus" > "$res/timeline/$c-perf.txt" 2>&1
        note "timeline $c on $gpus GPU(s): exit $?"
      done
      ;;
    *) note "unknown stage $stage" ;;
  esac
  note "stage $stage: $((SECONDS - start)) s"
  # Packed after every stage: a call cut off at its limit still returns the stages done.
  tar czf "$pack" -C "$res" .
done
cat "$res/summary.txt"
