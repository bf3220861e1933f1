set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
OUT=$OUT/tuner timeout 200 bash scripts/gpu-tuner-compare.sh > /dev/null 2>&1; echo "tuner exit $? $((SECONDS-start)) s"; cat $OUT/tuner/compare.txt | head -30
tar czf $OUT/tuner.tgz -C $OUT tuner && rm -rf $OUT/tuner
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 100 gpu-bin/oxccl-perf $c -b ${MIN:-256M} -e ${MAX:-1G} -f 2 -n 10 -w 3 -c 1 --check-max 1M --gpus ${G:-4} $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
EXTRA="--baseline nccl" run all_reduce def-nccl
EXTRA="" run all_reduce ch128 NCCL_MAX_NCHANNELS=128 NCCL_MIN_NCHANNELS=128
EXTRA="" run all_reduce ch96 NCCL_MAX_NCHANNELS=96 NCCL_MIN_NCHANNELS=96
EXTRA="" run all_reduce def2
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
OUT=$OUT/tests GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="the_one_hop_kernel_over_ll128" GPU_TEST_TIMEOUT=200 OXCCL_TEST_SKIP= timeout 205 bash gpu-bin/gpu-run.sh
grep -h "cases ok\|FAILED\|panicked\|test result" $OUT/tests/gpu_collectives.log | cut -c1-160 | tail -8
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "total $((SECONDS-start)) s"
