set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b ${MIN:-128K} -e ${MAX:-2M} -f 2 -n 30 -w 5 -c 1 --gpus $G $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
for r in 1 2; do
  EXTRA="" run all_reduce def-$r
  EXTRA="" run all_reduce ll-$r OXCCL_GPU_DIRECT_LL128_BYTES=1G
  EXTRA="" MIN=1M MAX=4M run all_reduce two-$r OXCCL_GPU_TWO_SHOT_BYTES=4M
  EXTRA="" MIN=1M MAX=4M run all_reduce ring-$r OXCCL_GPU_TWO_SHOT_BYTES=0
  for c in all_gather reduce_scatter broadcast; do
    EXTRA="" run $c def-$r
    EXTRA="" run $c ll-$r OXCCL_GPU_DIRECT_LL128_BYTES=1G
  done
done
for c in all_reduce all_gather reduce_scatter broadcast; do EXTRA="--baseline nccl" MAX=4M run $c nccl; done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "perf $((SECONDS-start)) s"
OUT=$OUT/tests GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="the_two_shot every_route_matches the_one_hop_kernel_over_ll128" GPU_TEST_TIMEOUT=400 timeout 405 bash gpu-bin/gpu-run.sh
grep -h "^test \|cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-220 | tail -24
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "total $((SECONDS-start)) s"
