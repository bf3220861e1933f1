set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/v
start=$SECONDS
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b 256K -e 4M -f 2 -n 30 -w 5 -c 1 --gpus 4 > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt)"; }
for r in 1 2; do
for c in all_reduce all_gather reduce_scatter; do
  run $c default$r
  run $c d1m$r OXCCL_GPU_DIRECT_BYTES=1M
done
done
echo "perf $((SECONDS-start)) s"
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches" GPU_TEST_TIMEOUT=190 timeout 195 bash gpu-bin/gpu-session.sh tests | tail -3
echo "total $((SECONDS-start)) s"
