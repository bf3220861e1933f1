set -u
source gpu-bin/gpu-env.sh
mkdir -p $OUT/p
for p in Simple LL LL128; do
  NCCL_PROTO=$p timeout 60 gpu-bin/oxccl-perf all_reduce -b 256K -e 8M -f 2 -n 20 -w 5 -c 0 --gpus 4 --baseline nccl > $OUT/p/nccl-proto-$p.txt 2>&1; echo "proto $p: $?"
done
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING timeout 60 gpu-bin/oxccl-perf all_reduce -b 256K -e 8M -f 2 -n 2 -w 1 -c 0 --gpus 4 --baseline nccl > $OUT/p/nccl-tuning.txt 2>&1; echo "tuning: $?"
grep -i "algo\|proto" $OUT/p/nccl-tuning.txt | sort | uniq -c | sort -rn | head -40 > $OUT/p/nccl-tuning-summary.txt
tar czf $OUT/protos.tgz -C $OUT p && rm -rf $OUT/p
OXCCL_GPU_LL_BYTES=8M GPU_SESSION_TAG=ll TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=512K TIMELINE_MAX=2M timeout 100 bash gpu-bin/gpu-session.sh timeline | tail -2
NCCL_ALGO=allreduce:doubling GPU_SESSION_TAG=dbl TIMELINE_COLLECTIVES=all_reduce TIMELINE_MIN=1M TIMELINE_MAX=1M timeout 100 bash gpu-bin/gpu-session.sh timeline | tail -2
