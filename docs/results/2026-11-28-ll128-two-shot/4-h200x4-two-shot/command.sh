set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b ${MIN:-256K} -e ${MAX:-4M} -f 2 -n 30 -w 5 -c 1 --gpus $G $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
for r in 1 2; do
  EXTRA="" run all_reduce def-$r
  EXTRA="" MIN=1M MAX=2M run all_reduce two-$r OXCCL_GPU_TWO_SHOT_BYTES=2M
  EXTRA="" MIN=1M MAX=2M run all_reduce ring-$r OXCCL_GPU_TWO_SHOT_BYTES=0
  EXTRA="" MIN=1M MAX=2M run all_reduce twoll-$r OXCCL_GPU_TWO_SHOT_BYTES=2M OXCCL_GPU_DIRECT_LL128_BYTES=1G
done
for c in all_reduce all_gather reduce_scatter broadcast; do EXTRA="--baseline nccl" MIN=128K run $c nccl; done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "perf $((SECONDS-start)) s"
OUT=$OUT/tests GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="the_two_shot" GPU_TEST_TIMEOUT=300 timeout 305 bash gpu-bin/gpu-run.sh
grep -h "^test \|cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-220 | tail -24
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "total $((SECONDS-start)) s"
