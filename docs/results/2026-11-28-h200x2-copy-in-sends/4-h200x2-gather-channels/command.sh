# Call 3 (nvidia-h200-x2): gather and scatter on more channels (gpu-bin-exp:
# EXP_DIRECT_MOST=128 lets them take 128 channels a peer on 2 ranks, the ring's connections,
# instead of 64; EXP_COPY_PARTS sets the own-block copy's lanes), against the default and
# NCCL; then the route matrix with 128.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1/1048576, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 32 > $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)"
nt_run() { # $1 bin dir ('' = NCCL) $2 test $3 name, env as set
  local path=$LD_LIBRARY_PATH; [[ -n $1 ]] && path="$PWD/$1/lib:$LD_LIBRARY_PATH"
  LD_LIBRARY_PATH="$path" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/$2_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/$3.txt 2>&1
  echo "$3: exit $? wrong $(wrong $r/$3.txt) $(rows $r/$3.txt)"
}
for t in gather scatter; do
  for round in 1 2; do
    nt_run gpu-bin-exp $t $t-default-$round
    EXP_DIRECT_MOST=128 nt_run gpu-bin-exp $t $t-128-$round
    EXP_DIRECT_MOST=128 EXP_COPY_PARTS=16 nt_run gpu-bin-exp $t $t-128-copy16-$round
    nt_run "" $t $t-nccl-$round
  done
done
echo "bench $((SECONDS-start)) s"
( EXP_DIRECT_MOST=128 OUT=$r/exp-routes XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches" GPU_TEST_TIMEOUT=220 bash gpu-bin-exp/gpu-run.sh > /dev/null
  echo "== exp-routes"; cat $r/exp-routes/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result" $r/exp-routes/*.log | cut -c1-200 | tail -6 )
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-3.tgz -C $r .
