set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
nvidia-smi -L
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 60 gpu-bin/oxccl-perf $c -b $MIN -e $MAX -f ${F:-2} -n ${N:-20} -w 5 -c 1 --gpus $GG $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $(grep -o 'persistent [0-9.]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
left() { (( SECONDS - start < ${BUDGET:-300} )); }
# the direct exchange held to 64 channels, the ring on 128: every exchange and sendrecv against NCCL and 64 channels
GG=$G MIN=4M MAX=1G F=4
for c in alltoall sendrecv gather scatter; do
  left && EXTRA="--baseline nccl" run $c g4-nccl
  left && EXTRA="" run $c g4-ch64 NCCL_MAX_NCHANNELS=64
done
GG=2
for c in alltoall sendrecv; do left && EXTRA="--baseline nccl" run $c g2-nccl; done
GG=$G MIN=64M MAX=1G F=4
for c in all_reduce broadcast; do left && EXTRA="--baseline nccl" run $c g4-nccl; done
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
