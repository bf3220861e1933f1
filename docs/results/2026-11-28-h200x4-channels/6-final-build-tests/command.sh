set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
nvidia-smi -L
( OUT=$OUT/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="the_two_shot" GPU_TEST_TIMEOUT=265 bash gpu-bin/gpu-run.sh ) &
( OUT=$OUT/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="the_one_hop_kernel_over_ll128 every_route_matches" GPU_TEST_TIMEOUT=265 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-a tests-b; do grep -h "cases ok\|FAILED\|panicked\|test result\|^test " $OUT/$d/gpu_collectives.log | cut -c1-200 | tail -12; done
echo "tests $((SECONDS-start)) s"
