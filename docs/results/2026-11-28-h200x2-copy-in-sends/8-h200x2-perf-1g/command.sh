# Call 6 (nvidia-h200-x2): HEAD (66052a4) oxccl-perf against NCCL at 256 MiB-1 GiB for the
# collectives not yet timed to 1 GiB this session (thread per rank, 2 GPUs).
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L
perf() { XDG_CACHE_HOME=/tmp/cache-p timeout 90 gpu-bin/oxccl-perf $1 -b 256M -e 1G -f 2 -n 20 -w 5 -c 1 --gpus 2 --baseline nccl > $r/perf-$1.txt 2>&1; echo "perf $1: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/perf-$1.txt | grep -o '[0-9]*$')"; grep -E '^ +[0-9]+ ' $r/perf-$1.txt | awk '{print "  ", $1, $6, $10, $14, $16}'; }
for c in broadcast reduce all_gather reduce_scatter scatter alltoall; do perf $c; done
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-6.tgz -C $r .
