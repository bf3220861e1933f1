# Call (nvidia-h200, one GPU): correctness of a group's copies beside its transfers: p2p::
# GPU tests (2, 3, 4 ranks as threads sharing the GPU), PyTorch's collectives with
# all_to_all_single (even and uneven) on 2 and 3 processes sharing the GPU under MPS.
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo "mps on"
( OUT=$r/head-p2p XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=240 bash gpu-bin/gpu-run.sh > /dev/null
  echo "== head-p2p"; cat $r/head-p2p/summary.txt; grep -h "cases ok\|groups ok\|FAILED\|panicked\|test result\|pair ok" $r/head-p2p/*.log | cut -c1-200 | tail -8 ) &
for w in 2 3; do
  WORLD=$w LD_PRELOAD=$PWD/gpu-bin/lib/libnccl.so.2 XDG_CACHE_HOME=/tmp/cache-t timeout 200 python3 examples/pytorch/check_collectives.py > $r/pytorch-oxccl-$w.txt 2>&1; echo "pytorch oxccl WORLD=$w exit $? ok lines $(grep -c ': ok' $r/pytorch-oxccl-$w.txt)"; grep -i "fail\|error\|wrong\|assert" $r/pytorch-oxccl-$w.txt | head -5
done
wait
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS-start)) s"
tar czf $OUT/h1-1.tgz -C $r .
