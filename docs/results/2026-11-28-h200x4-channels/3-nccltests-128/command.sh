set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
nvidia-smi -L
# 1. nccl-tests (-g 4 and mpirun -np 4) and PyTorch with the new defaults
GPU_SESSION_TAG=nt NCCL_TESTS_MAX=256M timeout 330 bash gpu-bin/gpu-session.sh nccl-tests pytorch | tail -3
echo "nccl-tests+pytorch $((SECONDS-start)) s"
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b $MIN -e $MAX -f ${F:-2} -n ${N:-30} -w 5 -c 1 --gpus $GG $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $(grep -o 'persistent [0-9.]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
left() { (( SECONDS - start < ${BUDGET:-560} )); }
# 2. the stall: first rows, with the slowest enqueue and single calls
GG=2 MIN=1M MAX=2M N=30
for r in 1 2 3 4 5 6; do left && EXTRA="--call-stats" run all_reduce stall-$r; done
# 3. 4 GPUs, new default (128 channels) against 64 and NCCL, 2 MiB-1 GiB
GG=$G MIN=2M MAX=1G F=2 N=20
for c in all_reduce broadcast reduce all_gather reduce_scatter; do
  left && EXTRA="--baseline nccl" run $c g4-nccl
  left && EXTRA="" MIN=2M MAX=64M run $c g4-ch64 NCCL_MAX_NCHANNELS=64
done
# 4. 2 GPUs, 16 MiB-1 GiB against NCCL
GG=2 MIN=16M MAX=1G F=4 N=20
for c in all_reduce broadcast reduce all_gather reduce_scatter; do left && EXTRA="--baseline nccl" run $c g2-nccl; done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
