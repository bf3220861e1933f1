set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
nvidia-smi -L
# 1. the final kernel's tests (never run on a GPU), two test processes at once
( OUT=$OUT/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="the_two_shot" GPU_TEST_TIMEOUT=400 bash gpu-bin/gpu-run.sh ) &
( OUT=$OUT/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="the_one_hop_kernel_over_ll128 every_route_matches" GPU_TEST_TIMEOUT=400 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-a tests-b; do grep -h "cases ok\|FAILED\|panicked\|test result\|^test " $OUT/$d/gpu_collectives.log | cut -c1-200 | tail -12; done
tar czf $OUT/tests.tgz -C $OUT tests-a tests-b && rm -rf $OUT/tests-a $OUT/tests-b
echo "tests $((SECONDS-start)) s"
# 2. measurements, if time is left
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 40 gpu-bin/oxccl-perf $c -b $MIN -e $MAX -f 2 -n ${N:-30} -w 5 -c 1 --gpus $GG $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
left() { (( SECONDS - start < 530 )); }
# 2 GPUs: two shots in one launch against the ring at 1-4 MiB
GG=2 MIN=1M MAX=4M
left && EXTRA="--baseline nccl" run all_reduce g2-nccl
for r in 1 2; do left && EXTRA="" run all_reduce g2-ring-$r; left && EXTRA="" run all_reduce g2-two-$r OXCCL_GPU_TWO_SHOT_BYTES=4M; done
# 4 GPUs: two shots at 8 MiB
GG=$G MIN=8M MAX=8M
for r in 1 2; do left && EXTRA="" run all_reduce g4-ring8m-$r; left && EXTRA="" run all_reduce g4-two8m-$r OXCCL_GPU_TWO_SHOT_BYTES=8M; done
# 4 GPUs: broadcast and reduce at 256 MiB-1 GiB, 64 against 128 channels
GG=$G MIN=256M MAX=1G N=20
for c in broadcast reduce; do
  left && EXTRA="--baseline nccl" run $c nccl
  left && EXTRA="" run $c ch64
  left && EXTRA="" run $c ch128 NCCL_MIN_NCHANNELS=128 NCCL_MAX_NCHANNELS=128
done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
