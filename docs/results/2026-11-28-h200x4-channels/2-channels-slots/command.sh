set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
nvidia-smi -L
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b $MIN -e $MAX -f ${F:-2} -n ${N:-30} -w 5 -c 1 --gpus $GG $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $(grep -o 'persistent.*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
left() { (( SECONDS - start < ${BUDGET:-540} )); }
# 1. 2 GPUs, the new default (two shots to 2 MiB) against the ring, 1-4 MiB
GG=2 MIN=1M MAX=4M
for r in 1 2; do left && EXTRA="" run all_reduce g2-def-$r; left && EXTRA="" run all_reduce g2-ring-$r OXCCL_GPU_TWO_SHOT_BYTES=0; done
# 2. 4 GPUs, 16 MiB-1 GiB: 64 channels of 256 KiB slots (default), 128 channels, 64 of 512 KiB slots
GG=$G MIN=16M MAX=1G F=4 N=20
for c in all_reduce broadcast reduce all_gather reduce_scatter; do
  left && EXTRA="--baseline nccl" run $c g4-nccl
  left && EXTRA="" run $c g4-ch128 NCCL_MIN_NCHANNELS=128 NCCL_MAX_NCHANNELS=128
  left && EXTRA="" run $c g4-slot512 OXCCL_GPU_SLOT_BYTES=512K
done
# 3. 2 GPUs at 256 MiB-1 GiB, all_reduce
GG=2 MIN=256M MAX=1G F=2 N=20
left && EXTRA="--baseline nccl" run all_reduce g2-nccl
left && EXTRA="" run all_reduce g2-ch128 NCCL_MIN_NCHANNELS=128 NCCL_MAX_NCHANNELS=128
left && EXTRA="" run all_reduce g2-slot512 OXCCL_GPU_SLOT_BYTES=512K
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
