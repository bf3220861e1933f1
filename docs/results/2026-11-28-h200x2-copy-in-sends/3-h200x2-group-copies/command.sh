# Call 2 (nvidia-h200-x2): HEAD (gpu-bin: a group's copies to itself run beside its
# transfers) and an experiment build (gpu-bin-exp: EXP_COPY_PARTS sets how many lanes copy
# a rank's own block in the direct alltoall/gather/scatter and in groups).
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
( OUT=$r/head-p2p XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=200 bash gpu-bin/gpu-run.sh > /dev/null ) &
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 24 > $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
wait
for d in head-p2p; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|groups ok\|FAILED\|panicked\|test result\|pair ok" $r/$d/*.log | cut -c1-200 | tail -8; done
echo "tests $((SECONDS-start)) s"
for lib in oxccl nccl; do
  pre=""; [[ $lib == oxccl ]] && pre=$PWD/gpu-bin/lib/libnccl.so.2
  LD_PRELOAD=$pre timeout 150 python3 examples/pytorch/check_collectives.py > $r/pytorch-$lib.txt 2>&1; echo "pytorch $lib exit $? ok lines $(grep -c ': ok' $r/pytorch-$lib.txt)"; grep -i "fail\|error\|wrong\|assert" $r/pytorch-$lib.txt | head -5
done
perf() { local bin=$1 name=$2; shift 2; XDG_CACHE_HOME=/tmp/cache-p timeout 120 $bin/oxccl-perf "$@" -f 2 -n 20 -w 5 -c 1 --gpus 2 --baseline nccl > $r/perf-$name.txt 2>&1; echo "perf $name: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/perf-$name.txt | grep -o '[0-9]*$')"; grep -E '^ +[0-9]+ ' $r/perf-$name.txt | awk '{print "  ", $1, $6, $10, $14, $16}'; }
perf gpu-bin grouped-head-1 alltoall_grouped -b 16M -e 1G
perf gpu-bin sendrecv-head sendrecv -b 16M -e 1G
nt_run() { # $1 bin dir $2 test $3 name, env EXP_COPY_PARTS as set
  LD_LIBRARY_PATH="$PWD/$1/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/$2_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/$3.txt 2>&1
  echo "$3: exit $? wrong $(wrong $r/$3.txt) $(rows $r/$3.txt)"
}
nt_run gpu-bin-exp alltoall a2a-exp-default
EXP_COPY_PARTS=16 nt_run gpu-bin-exp alltoall a2a-exp-16
EXP_COPY_PARTS=4 nt_run gpu-bin-exp alltoall a2a-exp-4
EXP_COPY_PARTS=8 nt_run gpu-bin-exp alltoall a2a-exp-8
nt_run gpu-bin-exp alltoall a2a-exp-default-2
EXP_COPY_PARTS=4 nt_run gpu-bin-exp alltoall a2a-exp-4-2
nt_run gpu-bin-exp gather gather-exp-default
EXP_COPY_PARTS=4 nt_run gpu-bin-exp gather gather-exp-4
LD_LIBRARY_PATH="$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/gather_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/gather-nccl.txt 2>&1; echo "gather-nccl: $(rows $r/gather-nccl.txt)"
EXP_COPY_PARTS=8 perf gpu-bin-exp grouped-exp-8 alltoall_grouped -b 16M -e 1G
perf gpu-bin grouped-head-2 alltoall_grouped -b 16M -e 1G
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-2.tgz -C $r .
