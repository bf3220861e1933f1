# Call 1 (nvidia-h200-x4, binaries of 4c0f013): the GPU suite not yet run with 128 channels,
# in three processes at once (separate OUT and kernel caches).
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
nvidia-smi -L; cat /sys/fs/cgroup/cpu.max 2>/dev/null; nproc
( OUT=$OUT/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads one_host::a_tuner_plugin one_host::the_executor_over_ll one_host::the_kernel_timeline one_host::large_messages p2p:: plans::" GPU_TEST_TIMEOUT=500 bash gpu-bin/gpu-run.sh ) &
( OUT=$OUT/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::" GPU_TEST_TIMEOUT=500 bash gpu-bin/gpu-run.sh ) &
( OUT=$OUT/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="processes:: faults:: five_ranks" GPU_TEST_TIMEOUT=420 bash gpu-bin/gpu-run.sh
  OUT=$OUT/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS="nvrtc gpu gpu_calls" GPU_TEST_TIMEOUT=80 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-a tests-b tests-c; do echo "== $d"; cat $OUT/$d/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|^test \|failures:" $OUT/$d/*.log | cut -c1-200 | tail -25; done
echo "tests $((SECONDS-start)) s"
