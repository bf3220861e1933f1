# Call 1 (nvidia-h200-x2, binaries of HEAD): the whole GPU suite on 2 GPUs, five test
# processes at once (separate OUT and kernel caches); p2p:: holds the new test of sends
# along the ring on 128 channels (lanes folded onto 128 blocks).
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L; nproc
# nccl-tests built beside the tests; its binaries come back for the next calls.
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 8 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 8 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)"
  ( cd $nt && tar czf $OUT/nt-build.tgz build/*_perf build-mpi/*_perf ) ) &
( OUT=$r/tests-p2p XDG_CACHE_HOME=/tmp/cache-e GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads one_host::a_tuner_plugin one_host::the_executor_over_ll one_host::the_kernel_timeline one_host::large_messages plans::" GPU_TEST_TIMEOUT=530 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::" GPU_TEST_TIMEOUT=530 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="processes:: faults:: five_ranks" GPU_TEST_TIMEOUT=430 bash gpu-bin/gpu-run.sh
  OUT=$r/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS="nvrtc gpu gpu_calls" GPU_TEST_TIMEOUT=90 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-d XDG_CACHE_HOME=/tmp/cache-d GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches the_one_hop_kernel_over_ll128 the_two_shot" GPU_TEST_TIMEOUT=530 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-p2p tests-a tests-b tests-c tests-d; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|groups ok\|failures:" $r/$d/*.log | cut -c1-200 | tail -14; done
echo "tests $((SECONDS-start)) s"
tar czf $OUT/x2-1.tgz -C $r .
