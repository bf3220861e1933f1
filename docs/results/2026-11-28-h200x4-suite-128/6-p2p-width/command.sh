# Call 6 (nvidia-h200-x4): sendrecv at 256 MiB-1 GiB with an uncommitted build (gpu-bin/alt,
# d0ab422 plus EXP_P2P_WIDTH: the channels of a send to the ring's next rank and a receive
# from its previous one), testing whether 128 blocks (64 a direction) reach NCCL where 256
# (128 a direction) lost.
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r
run() { local tag=$1; shift; env "$@" timeout 60 gpu-bin/alt/oxccl-perf sendrecv -b 256M -e 1G -f 2 -n 20 -w 5 -c 1 --check-max 1M --gpus 4 ${BASE:-} > $r/sendrecv-$tag.txt 2>&1; echo "$tag: $? $(awk '$1 ~ /^[0-9]+$/ {printf "%s:%s|%s ", $1, $6, $14}' $r/sendrecv-$tag.txt) $((SECONDS-start)) s"; }
BASE="--baseline nccl" run default
run w64 EXP_P2P_WIDTH=64
run w42 EXP_P2P_WIDTH=42
run w32 EXP_P2P_WIDTH=32
run w64b EXP_P2P_WIDTH=64
run default2
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
