set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/ab
start=$SECONDS
run() { local c=$1 label=$2 bin=$3; shift 3; env "$@" timeout 90 gpu-bin/$bin $c -b ${MIN:-128K} -e ${MAX:-4M} -f 2 -n 30 -w 5 -c 1 --gpus ${G:-4} $EXTRA > $OUT/ab/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/ab/$c-$label.txt) $((SECONDS-start)) s"; }
EXTRA=""
for r in 1 2; do
  for c in all_reduce all_gather reduce_scatter; do
    run $c main$r oxccl-perf
    run $c ra$r ra/oxccl-perf
  done
done
MIN=512K MAX=2M run all_reduce ch24 oxccl-perf NCCL_MIN_NCHANNELS=24
MIN=512K MAX=2M run all_reduce ch32 oxccl-perf NCCL_MIN_NCHANNELS=32
EXTRA="--baseline nccl"
for c in all_reduce all_gather reduce_scatter; do run $c ra-nccl ra/oxccl-perf; done
echo "perf $((SECONDS-start)) s"
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
OUT=$OUT/ratests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches five_ranks" GPU_TEST_TIMEOUT=280 timeout 290 bash gpu-bin/ra/gpu-run.sh
grep -h "cases ok\|FAILED\|panicked\|test result" $OUT/ratests/gpu_collectives.log | cut -c1-160 | tail -12
tar czf $OUT/ratests.tgz -C $OUT ratests && rm -rf $OUT/ratests
echo "total $((SECONDS-start)) s"
