set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/ab
start=$SECONDS
run() { local c=$1 label=$2 bin=$3; shift 3; env "$@" timeout 90 gpu-bin/$bin $c -b ${MIN:-256K} -e ${MAX:-8M} -f 2 -n 30 -w 5 -c 1 --gpus 4 $EXTRA > $OUT/ab/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/ab/$c-$label.txt)"; }
EXTRA=""
run all_reduce old oxccl-perf-old
for r in 1 2; do
  run all_reduce mid$r oxccl-perf-mid
  run all_reduce new$r oxccl-perf
  run all_reduce simple$r oxccl-perf OXCCL_GPU_LL_BYTES=0
  run all_reduce ll$r oxccl-perf OXCCL_GPU_LL_BYTES=8M
done
for c in all_gather reduce_scatter broadcast; do
  run $c mid oxccl-perf-mid
  run $c new oxccl-perf
done
EXTRA="--baseline nccl"
for c in all_reduce all_gather reduce_scatter broadcast; do MIN=8 MAX=64M run $c nccl oxccl-perf; done
echo "perf $((SECONDS-start)) s"
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
OXCCL_GPU_LL_BYTES=0 GPU_SESSION_TAG=tl TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=2M TIMELINE_MAX=2M timeout 60 bash gpu-bin/gpu-session.sh timeline | tail -1
GPU_SESSION_TAG=tlll TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=1M TIMELINE_MAX=1M timeout 60 bash gpu-bin/gpu-session.sh timeline | tail -1
echo "before tests $((SECONDS-start)) s"
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches the_executor_over_ll ranks_on_separate_hosts_run_kernels" GPU_TEST_TIMEOUT=320 timeout 330 bash gpu-bin/gpu-session.sh tests | tail -3
echo "total $((SECONDS-start)) s"
