set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b ${MIN:-512K} -e ${MAX:-4M} -f 2 -n 30 -w 5 -c 1 --gpus $G $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
for r in 1 2; do
  EXTRA="" run all_reduce fused-$r
  EXTRA="" MIN=1M MAX=2M run all_reduce ring-$r OXCCL_GPU_TWO_SHOT_BYTES=0
done
EXTRA="" MIN=2M MAX=4M run all_reduce fused4m OXCCL_GPU_TWO_SHOT_BYTES=4M OXCCL_GPU_DIRECT_BYTES=3M
EXTRA="--baseline nccl" run all_reduce nccl
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 60 gpu-bin/oxccl-perf all_reduce -b 1M -e 1M -n 2 -w 1 --gpus $G > $OUT/v/init-log.txt 2>&1; echo "LL lines notes: $(grep -c "stay on LL" $OUT/v/init-log.txt)"
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "perf $((SECONDS-start)) s"
OUT=$OUT/tests GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="the_two_shot" GPU_TEST_TIMEOUT=280 timeout 285 bash gpu-bin/gpu-run.sh
grep -h "^test \|cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-220 | tail -24
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "total $((SECONDS-start)) s"
