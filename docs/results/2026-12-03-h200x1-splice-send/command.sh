#!/usr/bin/env bash
# Device call 3 (session 31): does a send by vmsplice+splice (no copy into the kernel)
# beat send() over loopback TCP on this machine's cores, with host memory as malloc gives
# it (kind 0) and as cudaHostAlloc gives it (kind 1, what NCCL stages network data in)?
# Two processes, each bound to a core, 1 MiB messages both ways at once.
# gpu-bin/zc/bench.c is splice-send-bench.c in this folder.
cd "$(dirname "$0")/.."
mkdir -p $OUT/zc
gcc -O2 -DWITH_CUDA -I/usr/local/cuda/include -o /tmp/bench gpu-bin/zc/bench.c -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,/usr/local/cuda/lib64 2>&1 | grep -i error | head -5
lscpu | grep -E "Model name|L3" | tee $OUT/zc/cpu.txt
for r in 1 2 3 4 5; do for kind in 0 1; do for m in 0 1; do
  timeout 60 /tmp/bench $m 1048576 4000 512 $kind
done; done; done 2>&1 | tee $OUT/zc/out.txt
cp "$0" gpu-bin/zc/bench.c $OUT/zc/
