#!/usr/bin/env bash
# Device call 1 (session 33): where each net's proxy spends the rank's core, by function.
# Every rank of NCCL over libnccl-net-oxccl.so and over NCCL's own sockets runs under perf
# record (cpu-clock, 4999 Hz, user and kernel; scripts/perf-rank.sh) at mpirun's default
# binding; all_reduce and reduce_scatter at 16 MiB (600 iterations) and all_reduce at 1 MiB
# (6000), two rounds; perf-report.sh then writes each file's tables by thread and function.
cd "$(dirname "$0")/.."
mkdir -p /tmp/perfb && tar xJf gpu-bin/perf.tar.xz -C /tmp/perfb && export PERF_BIN=/tmp/perfb/perf/perf
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
cp "$0" $parts/command.sh
# Does perf run here at all?
PERF_DIR=$parts/probe bash gpu-bin/perf-rank.sh sleep 0.2 > $parts/probe.txt 2>&1; echo "probe rc $?"; cat $parts/probe.txt | head -5
cat /proc/sys/kernel/perf_event_paranoid
[[ -s $parts/probe/run-0.data ]] || { pack probe; exit 1; }
for r in 1 2; do for size in 16M 1M; do
  n=600; tests="all_reduce reduce_scatter"; [[ $size == 1M ]] && { n=6000; tests=all_reduce; }
  dir=$parts/perf-$size-$r; mkdir -p $dir
  OUT=$dir GPU_SESSION_TAG=perf-$size-$r PERF_DIR=$dir NETPLUGIN_RANK_WRAPPER=$PWD/gpu-bin/perf-rank.sh NETPLUGIN_MPIRUN_ARGS="-x PERF_DIR -x PERF_BIN -x NCCL_SET_THREAD_NAME=1" NCCL_TESTS_MIN=$size NCCL_TESTS_MAX=$size NCCL_TESTS_ITERS=$n NETPLUGIN_TESTS="$tests" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 200 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "exit [1-9]|wrong [1-9]|^(all_reduce|reduce_scatter) " | head -8
  echo "run $size $r at $((SECONDS-start)) s"
done; done
for d in $parts/perf-*; do bash gpu-bin/perf-report.sh $d; ls $d/*.data | head -3; done
rm -f $parts/perf-*/*.data
pack all
echo "total $((SECONDS-start)) s"
