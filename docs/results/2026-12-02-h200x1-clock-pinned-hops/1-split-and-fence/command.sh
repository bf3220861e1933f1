#!/usr/bin/env bash
# Device call 1 (session 23): 9c8063f + temporary switch OX_EXP_LLFENCE (EXP_OX_DEFINES).
cd "$(dirname "$0")/.."
export NET_TIMEOUT=90
# 1. Traced hops with the kernel clock pinned: baseline (tl) and a system fence before an
#    LL send's tail (tlf), all_gather and reduce_scatter at 8-128 B, 2 ranks.
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$t-tl" NET_ENV_tlf="OXCCL_KERNEL_TRACE=/tmp/tl/$t-tlf EXP_OX_DEFINES=-DOX_EXP_LLFENCE"
  mkdir -p /tmp/tl
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=200 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl oxccl-env-tlf" timeout 100 bash gpu-bin/gpu-session.sh net
done
mkdir -p /tmp/res
tar xzf $OUT/results-hops-all_gather.tgz -C /tmp/res 2>/dev/null; mkdir -p /tmp/res2; tar xzf $OUT/results-hops-reduce_scatter.tgz -C /tmp/res2 2>/dev/null
ls -R /tmp/res | head -30 > $OUT/layout.txt
for t in all_gather reduce_scatter; do
  for v in tl tlf; do
    k=$(ls /tmp/tl/$t-$v.pid*.rank0.txt /tmp/tl/$t-$v.pid*.rank1.txt)
    p=$(find /tmp/res /tmp/res2 -path "*net-2-$t-oxccl-env-$v/*" -name "*.json" | sort -t k -k2)
    echo "== $t $v: $k $p" >> $OUT/hops.txt
    python3 scripts/kernel-hops.py $k $(find /tmp/res /tmp/res2 -path "*net-2-$t-oxccl-env-$v/*" -name "*rank0.json") $(find /tmp/res /tmp/res2 -path "*net-2-$t-oxccl-env-$v/*" -name "*rank1.json") >> $OUT/hops.txt 2>&1
  done
done
tar czf $OUT/tl.tgz -C /tmp tl
# 2. Untraced, 12 cycles: the fence against the baseline and NCCL (checks NET_CYCLES and
#    the comparison on this machine).
export NET_ENV_f="EXP_OX_DEFINES=-DOX_EXP_LLFENCE"
GPU_SESSION_TAG=ab NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=2K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-env-f oxccl-lib-lib" timeout 200 bash gpu-bin/gpu-session.sh net
