set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
G=$(nvidia-smi -L | wc -l)
mkdir -p $OUT/v
run() { local c=$1 label=$2; shift 2; env "$@" timeout 40 gpu-bin/oxccl-perf $c -b ${MIN:-512K} -e ${MAX:-8M} -f 2 -n 30 -w 5 -c 1 --gpus $G $EXTRA > $OUT/v/$c-$label.txt 2>&1; echo "$c $label: exit $? $(grep -o 'Out of bounds values : [0-9]*' $OUT/v/$c-$label.txt) $((SECONDS-start)) s"; }
EXTRA="--baseline nccl" run all_reduce nccl
EXTRA="" run all_reduce def-2
EXTRA="" MIN=4M MAX=4M run all_reduce ring4m OXCCL_GPU_TWO_SHOT_BYTES=0
EXTRA="-d double" MIN=1K MAX=4M run all_reduce f64
tar czf $OUT/v.tgz -C $OUT v && rm -rf $OUT/v
echo "total $((SECONDS-start)) s"
