set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/ab
start=$SECONDS
run() { local c=$1 label=$2 bin=$3; shift 3; env "$@" timeout 90 gpu-bin/$bin $c -b 256K -e 8M -f 2 -n 30 -w 5 -c 1 --gpus 4 $EXTRA > $OUT/ab/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/ab/$c-$label.txt)"; }
EXTRA=""
for r in 1 2; do
  run all_reduce old$r oxccl-perf-old
  run all_reduce new$r oxccl-perf
  run all_reduce newll$r oxccl-perf OXCCL_GPU_LL_BYTES=8M
  run all_reduce oldll$r oxccl-perf-old OXCCL_GPU_LL_BYTES=8M
done
for c in all_gather reduce_scatter broadcast; do
  run $c old oxccl-perf-old
  run $c new oxccl-perf
  run $c newll oxccl-perf OXCCL_GPU_LL_BYTES=8M
done
EXTRA="--baseline nccl" run all_reduce new-nccl oxccl-perf
echo "perf $((SECONDS-start)) s"
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
GPU_SESSION_TAG=tl TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=2M TIMELINE_MAX=2M timeout 60 bash gpu-bin/gpu-session.sh timeline | tail -1
OXCCL_GPU_LL_BYTES=8M GPU_SESSION_TAG=tlll TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=1M TIMELINE_MAX=1M timeout 60 bash gpu-bin/gpu-session.sh timeline | tail -1
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches the_executor_over_ll ranks_on_separate_hosts" GPU_TEST_TIMEOUT=330 timeout 340 bash gpu-bin/gpu-session.sh tests | tail -3
echo "total $((SECONDS-start)) s"
