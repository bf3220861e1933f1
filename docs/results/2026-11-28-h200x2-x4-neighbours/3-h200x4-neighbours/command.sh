# Call 3 (nvidia-h200-x4, binaries of the working tree after 1b-cap: neighbour channels held
# to 64, collectives' exchanges not widened unless EXP_NB_COLL is set): p2p tests with the
# setting; sendrecv and alltoall (groups, nccl-tests) with OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS
# 0 and 64, NCCL beside; oxccl-perf's alltoall collective widened and not; every exchange
# test 8 B-1 GiB with 64 checked; PyTorch with 64.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 16 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
( OUT=$r/tests-p2p XDG_CACHE_HOME=/tmp/cache-e GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=200 bash gpu-bin/gpu-run.sh > /dev/null ) &
wait
cat $r/tests-p2p/summary.txt; grep -h "groups ok\|FAILED\|panicked\|test result" $r/tests-p2p/*.log | cut -c1-200
echo "tests $((SECONDS-start)) s"
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
ntrun() { # test lib nb tag args...
  local t=$1 lib=$2 nb=$3 tag=$4; shift 4
  local path=; [[ $lib == oxccl ]] && path=$PWD/gpu-bin/lib
  LD_LIBRARY_PATH="$path${path:+:}$LD_LIBRARY_PATH" OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=$nb timeout 120 $nt/build/${t}_perf "$@" -c 1 -n 20 -w 5 -g 4 > $r/$tag.txt 2>&1
  echo "$tag: exit $? wrong $(wrong $r/$tag.txt) $(rows $r/$tag.txt)"
}
for round in 1 2; do for t in sendrecv alltoall; do
  ntrun $t oxccl 0 $t-nb0-$round -b 16M -e 1G -f 2
  ntrun $t oxccl 64 $t-nb64-$round -b 16M -e 1G -f 2
  ntrun $t nccl 0 $t-nccl-$round -b 16M -e 1G -f 2
done; done
echo "nccl-tests perf $((SECONDS-start)) s"
for v in "0" "64" "64 coll"; do
  set -- $v
  tag=perf-alltoall-nb$1${2:+-coll}
  if [[ -n ${2:-} ]]; then export EXP_NB_COLL=1; else unset EXP_NB_COLL; fi
  OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=$1 timeout 90 gpu-bin/oxccl-perf alltoall -b 16M -e 1G -f 2 -n 20 -w 5 -c 1 --gpus 4 > $r/$tag.txt 2>&1
  echo "$tag exit $? $(grep -E '^ +[0-9]+ ' $r/$tag.txt | awk '{printf "%s:%s/%s ", $1, $6, $10}')"
done
unset EXP_NB_COLL
echo "oxccl-perf $((SECONDS-start)) s"
for t in sendrecv alltoall gather scatter; do ntrun $t oxccl 64 full-$t-nb64 -b 8 -e 1G -f 4; done
for t in sendrecv alltoall; do for nb in 0 64; do
  LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=$nb timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME -x OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/${t}_perf -b 16M -e 1G -f 4 -c 1 -n 20 -w 5 -g 1 > $r/mpi-$t-nb$nb.txt 2>&1
  echo "mpi-$t-nb$nb: exit $? wrong $(wrong $r/mpi-$t-nb$nb.txt) $(rows $r/mpi-$t-nb$nb.txt)"
done; done
echo "mpirun $((SECONDS-start)) s"
OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=64 LD_PRELOAD=$PWD/gpu-bin/lib/libnccl.so.2 timeout 150 python3 examples/pytorch/check_collectives.py > $r/pytorch-oxccl-nb64.txt 2>&1; echo "pytorch exit $?"; grep -c ": ok" $r/pytorch-oxccl-nb64.txt; grep -v ": ok" $r/pytorch-oxccl-nb64.txt | tail -5
echo "total $((SECONDS-start)) s"
tar czf $OUT/x4-1.tgz -C $r .
