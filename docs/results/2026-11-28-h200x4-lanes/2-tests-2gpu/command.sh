# Call 2 (nvidia-h200-x4, right after call 1, binaries of 31b44db = main): the GPU tests not
# yet run with the twelfth session's kernel, then oxccl-perf against NCCL on 2 of the 4 GPUs.
set -u; start=$SECONDS
OUT=$OUT/tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="processes:: faults:: five_ranks" GPU_TEST_TIMEOUT=330 timeout 340 bash gpu-bin/gpu-run.sh
grep -h "^test \|cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-160 | tail -30
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests; echo "tests $((SECONDS-start)) s"
GPU_BENCH_GPUS=2 GPU_BENCH_COLLECTIVES="all_reduce all_gather reduce_scatter broadcast" GPU_BENCH_STAGED=0 GPU_BENCH_TIMEOUT=60 OUT=$OUT/b2 timeout 200 bash gpu-bin/gpu-bench.sh
tar czf $OUT/b2.tgz -C $OUT b2 && rm -rf $OUT/b2; echo "total $((SECONDS-start)) s"
