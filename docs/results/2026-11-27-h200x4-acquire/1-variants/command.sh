set -u
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT/v
start=$SECONDS
OUT=$OUT/v VARIANT_MIN=256K VARIANT_MAX=8M VARIANT_COLLECTIVES=all_reduce timeout 200 bash gpu-bin/gpu-variants.sh default direct=NCCL_ALGO=direct doubling=NCCL_ALGO=allreduce:doubling d0=OXCCL_GPU_DIRECT_BYTES=0 d4m=OXCCL_GPU_DIRECT_BYTES=4M
OUT=$OUT/v VARIANT_MIN=256K VARIANT_MAX=8M VARIANT_COLLECTIVES="all_gather reduce_scatter" timeout 120 bash gpu-bin/gpu-variants.sh default d0=OXCCL_GPU_DIRECT_BYTES=0
echo "variants $((SECONDS-start)) s"
tar czf $OUT/variants.tgz -C $OUT v && rm -rf $OUT/v
GPU_SESSION_TAG=tl TIMELINE_MIN=512K TIMELINE_MAX=2M timeout 100 bash gpu-bin/gpu-session.sh timeline | tail -3
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches ranks_as_threads five_ranks ranks_on_separate_hosts" GPU_TEST_TIMEOUT=280 timeout 290 bash gpu-bin/gpu-session.sh tests | tail -5
echo "total $((SECONDS-start)) s"
