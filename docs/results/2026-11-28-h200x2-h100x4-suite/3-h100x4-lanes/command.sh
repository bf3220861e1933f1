set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/v
start=$SECONDS
run() { local c=$1 label=$2; shift 2; env "$@" timeout 90 gpu-bin/oxccl-perf $c -b ${MIN:-256K} -e ${MAX:-4M} -f 2 -n 30 -w 5 -c 1 --gpus 4 $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
EXTRA=""
for r in 1 2; do
  run all_reduce lanes$r
  run all_reduce ch16-$r NCCL_MAX_NCHANNELS=16
  MIN=2M MAX=2M run all_reduce ch64-$r NCCL_MIN_NCHANNELS=64
done
EXTRA="--baseline nccl" run all_reduce lanes-nccl
echo "perf $((SECONDS-start)) s"
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
OUT=$OUT/tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches" GPU_TEST_TIMEOUT=230 timeout 235 bash gpu-bin/gpu-run.sh
grep -h "cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-160 | tail -8
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "total $((SECONDS-start)) s"
