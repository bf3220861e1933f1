#!/usr/bin/env bash
# Session experiments (2026-11-23, third visit), call 1: questions before code changes.
#  A. sendrecv 64 KiB-4 MiB on the Simple path: channels (NCCL_MIN_NCHANNELS) and slot size
#     (OXCCL_GPU_SLOT_BYTES) — where does the 128-256 KiB gap to NCCL come from?
#  B. NCCL's protocols on all_reduce (nccl-tests, real NCCL, NCCL_PROTO / NCCL_ALGO) beside
#     oxccl's libnccl.so.2: does LL128 win anywhere oxccl's defaults do not?
#  C. the host socket Net on this 16-core machine (CPU buffers) against Open MPI over TCP,
#     and raw loopback TCP: is the staged path's large-message gap the Net?
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp "$0" "$res/"
nvidia-smi topo -m > "$res/topo.txt" 2>&1
note() { echo "$*" | tee -a "$res/summary.txt"; }
T0=$SECONDS
# A
run_sr() { # name, env...
  local name=$1; shift
  env "$@" timeout 120 "$bin/oxccl-perf" sendrecv -b 64K -e 4M -f 2 -n 50 -w 10 -c 1 --gpus 2 --baseline nccl > "$res/sr-$name.txt" 2>&1
  note "sr $name: exit $? ($((SECONDS-T0)) s)"
}
run_sr default
run_sr min4 NCCL_MIN_NCHANNELS=4
run_sr min8 NCCL_MIN_NCHANNELS=8
run_sr min16 NCCL_MIN_NCHANNELS=16
run_sr slot64k OXCCL_GPU_SLOT_BYTES=65536
run_sr slot32k-min8 OXCCL_GPU_SLOT_BYTES=32768 NCCL_MIN_NCHANNELS=8
run_sr default-again
# B
nt="$root/.nccl-tests"
make -C "$nt" MPI=0 CUDA_HOME="$CUDA_HOME" NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt/build" -j 16 > "$res/nccl-tests-build.txt" 2>&1
note "nccl-tests built: $? ($((SECONDS-T0)) s)"
ar() { # name, libpath, env...
  local name=$1 path=$2; shift 2
  env LD_LIBRARY_PATH="$path" "$@" timeout 120 "$nt/build/all_reduce_perf" -b 8 -e 256M -f 4 -g 2 -c 1 -n 30 -w 5 > "$res/ar-$name.txt" 2>&1
  note "ar $name: exit $? ($((SECONDS-T0)) s)"
}
ar oxccl "$bin/lib:$LD_LIBRARY_PATH"
ar nccl-default "$LD_LIBRARY_PATH"
ar nccl-LL "$LD_LIBRARY_PATH" NCCL_PROTO=LL
ar nccl-LL128 "$LD_LIBRARY_PATH" NCCL_PROTO=LL128
ar nccl-Simple "$LD_LIBRARY_PATH" NCCL_PROTO=Simple
ar nccl-tree "$LD_LIBRARY_PATH" NCCL_ALGO=Tree
ar nccl-default-info "$LD_LIBRARY_PATH" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING
ar oxccl-again "$bin/lib:$LD_LIBRARY_PATH"
# C
python3 - > "$res/tcp-raw.txt" 2>&1 <<'PY'
import socket, threading, time
N = 1 << 30
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
def rx():
    c, _ = s.accept(); got = 0; mv = memoryview(bytearray(4 << 20))
    while got < N: got += c.recv_into(mv)
t = threading.Thread(target=rx); t.start()
c = socket.create_connection(('127.0.0.1', s.getsockname()[1])); data = b'x' * (4 << 20)
t0 = time.time(); sent = 0
while sent < N: c.sendall(data); sent += len(data)
t.join(); print("one TCP loopback stream, python, 1 GiB: %.2f GB/s" % (N / (time.time() - t0) / 1e9))
PY
note "tcp raw: $(cat $res/tcp-raw.txt)"
for c in sendrecv all_reduce; do
  NCCL_SHM_DISABLE=1 timeout 150 mpirun --allow-run-as-root -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE -x LD_LIBRARY_PATH \
    "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --blocking 1 --baseline mpi > "$res/cpu-net-$c.txt" 2>&1
  note "cpu net $c: exit $? ($((SECONDS-T0)) s)"
done
cat "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
