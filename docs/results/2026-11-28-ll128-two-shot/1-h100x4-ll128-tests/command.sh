set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
# 1. what never ran on a GPU: every route (default one-hop kernel after the refactor), the tuner plugin on GPU kernels, the LL128 one-hop kernel
OUT=$OUT/tests GPU_TESTS="gpu_collectives" GPU_TEST_FILTERS="every_route_matches a_tuner_plugin the_one_hop_kernel_over_ll128" GPU_TEST_TIMEOUT=300 timeout 305 bash gpu-bin/gpu-run.sh
grep -h "cases ok\|FAILED\|panicked\|test result\|^test " $OUT/tests/gpu_collectives.log | cut -c1-200 | tail -14
tar czf $OUT/tests.tgz -C $OUT tests && rm -rf $OUT/tests
echo "tests $((SECONDS-start)) s"
# 2. LL128 one-hop A/B, 4 GPUs
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b ${MIN:-128K} -e ${MAX:-2M} -f 2 -n 30 -w 5 -c 1 --gpus 4 $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
for r in 1 2; do
  for c in all_reduce all_gather reduce_scatter; do
    EXTRA="" run $c ll-$r
    EXTRA="" run $c ll128-$r OXCCL_GPU_DIRECT_LL128=1
  done
done
EXTRA="" MIN=512K MAX=512K run all_reduce ring512k NCCL_MIN_NCHANNELS=16 OXCCL_GPU_DIRECT_BYTES=256K
for c in all_reduce all_gather reduce_scatter; do EXTRA="--baseline nccl" run $c nccl; done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
