#!/usr/bin/env bash
# Across hosts on one GPU machine: nccl-tests (built with MPI=1 in $1, against the
# machine's NCCL header) under mpirun, each rank posing as a host of its own
# (NCCL_HOSTID=host<rank>; or NET_PER_HOST ranks to a host), all ranks sharing the GPUs
# there are under MPS, over loopback
# (NCCL_SOCKET_IFNAME=lo): oxccl's libnccl.so.2 (gpu-bin/lib first on the library path)
# against the machine's NCCL at its defaults and at the socket settings given in
# NCCL_BEST (default: 4 threads x 4 sockets per thread), in one run. Also the loopback TCP
# throughput between two processes, the physical limit of this setup. Tables go to $OUT
# (or gpu-out/) as net-<n>r-<test>-<lib>.txt, a summary to summary.txt, and a picture per
# test and rank count, net-<n>r-<test>.svg (busbw and time against size, a line per
# library whose run succeeded), drawn by oxccl-plot from gpu-bin/ (scripts/gpu-build.sh).
#
# Knobs: NET_TESTS (default all_reduce all_gather reduce_scatter broadcast alltoall
# sendrecv), NET_RANKS (default "2 4"), NET_LIBS (default "oxccl nccl nccl-best"; also
# oxccl-simple: oxccl with NCCL_PROTO=Simple, no LL over the network; oxccl-algo-<name>:
# oxccl with NCCL_ALGO=<name> (ring, direct); oxccl-proxy<N>: oxccl with
# OXCCL_PROXY_THREADS=N; oxccl-env-<name>: oxccl with the variables that NET_ENV_<name>
# sets, "K=V K=V"; nccl-env-<name>: the machine's NCCL with them; oxccl-lib-<dir>: the
# libnccl.so.2 in gpu-bin/<dir>, another build for an A/B),
# NET_MAX (default 128M), NET_ITERS (20), NET_TIMEOUT (per run, 150 s), NET_ARGS (more
# nccl-tests arguments, e.g. "-C 1": the host's time to issue a call), NET_CYCLES (default 1:
# nccl-tests' -N, each size measured in that many cycles of NET_ITERS calls; the pictures and
# compare-<tag>-<test>.txt take each size's median over them, which a cycle's stall does not
# move), NET_TRACE (1: oxccl's
# runs write their proxy timelines, OXCCL_PROXY_TRACE, under traces/<table>/, summarized by
# scripts/proxy-trace-summary.py into trace-<table>.txt), NET_SAMPLE (1: each run's count
# of runnable threads on the machine, which they are when more than the cores, and the CPU
# seconds of its threads by name, by scripts/runnable-sample.py, a line a run in
# runnable.txt), NET_PER_HOST
# (default 1: ranks per posed host, consecutive ranks together; with as many GPUs as ranks
# per host, a host's ranks reach each other over NVLink and the others over the network).
# Where NET_LIBS holds an NCCL run (nccl, nccl-best, nccl-env-<name>), the first that
# succeeded is the base of compare-<tag>-<test>.txt (`oxccl-plot --compare-to`): every
# library's median time per size, and its time over the base's, geometric mean at 8-128 B,
# 512 B-32 KiB and from 1 MiB (also in summary.txt).
# NVLink multicast stays off; GPU clocks and modes are never touched.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: gpu-net-bench.sh <nccl-tests MPI=1 build directory>}"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gpus=$(nvidia-smi -L | wc -l)
if ((gpus == 1)); then on="one GPU"; else on="$gpus GPUs"; fi

# MPS lets the ranks' kernels run at once on a shared GPU (left running for later calls);
# without it the GPU time-slices the ranks' processes and every call takes milliseconds.
# The default pipe directory: a daemon of another one (another script's) does not count.
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
if ! echo get_server_list | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1; then
  nvidia-cuda-mps-control -d && sleep 1 && echo "MPS started" | tee -a "$out/summary.txt"
fi
echo get_server_list | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "MPS is not running: the tables would time-slice the GPU" | tee -a "$out/summary.txt"; exit 1; }

# Each rank: the host id of its group of NET_PER_HOST ranks and GPU rank % gpus.
wrapper="$out/rank.sh"
cat > "$wrapper" <<'EOF'
#!/usr/bin/env bash
export NCCL_HOSTID="host$((OMPI_COMM_WORLD_RANK / ${NET_PER_HOST:-1}))"
export CUDA_VISIBLE_DEVICES=$((OMPI_COMM_WORLD_RANK % NET_GPUS)) NCCL_TESTS_DEVICE=0
exec "$@"
EOF
chmod +x "$wrapper"

# The loopback limit: one TCP stream, and four.
python3 - <<'PY' 2>&1 | tee -a "$out/summary.txt"
import socket, threading, time
def stream(port, total, results):
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); srv.bind(("127.0.0.1", port)); srv.listen(1)
    def send():
        c = socket.create_connection(("127.0.0.1", port)); buf = b"\0" * (1 << 20); sent = 0
        while sent < total: sent += c.send(buf)
        c.close()
    t = threading.Thread(target=send); t.start()
    conn, _ = srv.accept(); got = 0; buf = bytearray(1 << 20); start = time.time()
    while got < total:
        n = conn.recv_into(buf)
        if n == 0: break
        got += n
    results.append(got / (time.time() - start)); t.join(); conn.close(); srv.close()
for streams in (1, 4):
    results = []; threads = [threading.Thread(target=stream, args=(45000 + i, 4 << 30, results)) for i in range(streams)]
    [t.start() for t in threads]; [t.join() for t in threads]
    print(f"loopback TCP, {streams} stream(s) between threads of one Python process: {sum(results)/1e9:.2f} GB/s in all")
PY

# A legend label per library; NCCL's version as its tables print it (nccl-library=22803).
label() {
  local version
  version=$(grep -o "nccl-library=[0-9]*" "$2" 2>/dev/null | head -1 | grep -o "[0-9]*$")
  version=${version:+ $((version / 10000)).$((version / 100 % 100)).$((version % 100))}
  case $1 in
    oxccl) echo "oxccl" ;;
    oxccl-simple) echo "oxccl, NCCL_PROTO=Simple" ;;
    oxccl-algo-*) echo "oxccl, NCCL_ALGO ${1#oxccl-algo-}" ;;
    oxccl-proxy*) echo "oxccl, ${1#oxccl-proxy} proxy thread(s)" ;;
    oxccl-env-*) local settings="NET_ENV_${1#oxccl-env-}"; echo "oxccl, ${!settings:-}" ;;
    oxccl-lib-*) echo "oxccl, gpu-bin/${1#oxccl-lib-}" ;;
    nccl) echo "NCCL$version at its defaults" ;;
    nccl-best) echo "NCCL$version, ${NCCL_BEST_THREADS:-4} threads × ${NCCL_BEST_SOCKS:-4} sockets" ;;
    nccl-env-*) local settings="NET_ENV_${1#nccl-env-}"; echo "NCCL$version, ${!settings:-}" ;;
    *) echo "$1" ;;
  esac
}

# Adds the variables NET_ENV_<$1> sets ("K=V K=V") to a run's mpirun -x list.
settings() {
  local name="NET_ENV_$1" kv
  for kv in ${!name:-}; do env+=(-x "$kv"); done
}

status=0
per_host=${NET_PER_HOST:-1}
for n in ${NET_RANKS:-2 4}; do
  # Tables net-<n>r-..., or net-<n>r<per>h-... with several ranks to a posed host.
  if ((per_host > 1)); then ranks="${n}r${per_host}h" hosts="$((n / per_host)) hosts"; else ranks="${n}r" hosts="hosts"; fi
  for t in ${NET_TESTS:-all_reduce all_gather reduce_scatter broadcast alltoall sendrecv}; do
    drawn=() base=""
    for lib in ${NET_LIBS:-oxccl nccl nccl-best}; do
      env=(-x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME -x NCCL_SOCKET_IFNAME=lo -x NET_GPUS="$gpus" -x NET_PER_HOST="$per_host")
      case $lib in
        oxccl) env+=(-x LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}") ;;
        oxccl-simple) env+=(-x LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}" -x NCCL_PROTO=Simple) ;;
        oxccl-algo-*) env+=(-x LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}" -x NCCL_ALGO="${lib#oxccl-algo-}") ;;
        oxccl-proxy[0-9]*) env+=(-x LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}" -x OXCCL_PROXY_THREADS="${lib#oxccl-proxy}") ;;
        oxccl-lib-*) env+=(-x LD_LIBRARY_PATH="$here/${lib#oxccl-lib-}:${LD_LIBRARY_PATH:-}") ;;
        oxccl-env-*) env+=(-x LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}") && settings "${lib#oxccl-env-}" ;;
        nccl) env+=(-x LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}") ;;
        nccl-best) env+=(-x LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" -x NCCL_SOCKET_NTHREADS="${NCCL_BEST_THREADS:-4}" -x NCCL_NSOCKS_PERTHREAD="${NCCL_BEST_SOCKS:-4}") ;;
        nccl-env-*) env+=(-x LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}") && settings "${lib#nccl-env-}" ;;
      esac
      table="$out/net-$ranks-$t-$lib.txt"
      traces=""
      if [[ ${NET_TRACE:-0} == 1 && $lib == oxccl* ]]; then
        traces="$out/traces/net-$ranks-$t-$lib"
        mkdir -p "$traces"
        env+=(-x OXCCL_PROXY_TRACE="$traces/t")
      fi
      sampler=""
      if [[ ${NET_SAMPLE:-0} == 1 ]]; then
        python3 "$here/../scripts/runnable-sample.py" "net-$ranks-$t-$lib" >> "$out/runnable.txt" 2>&1 &
        sampler=$!
      fi
      timeout "${NET_TIMEOUT:-150}" mpirun --allow-run-as-root --oversubscribe -np "$n" --bind-to none \
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "${env[@]}" \
        "$wrapper" "$build/${t}_perf" -b 8 -e "${NET_MAX:-128M}" -f 4 -c 1 -n "${NET_ITERS:-20}" -N "${NET_CYCLES:-1}" -w 5 -g 1 ${NET_ARGS:-} > "$table" 2>&1
      rc=$?
      [[ -n $sampler ]] && kill -TERM "$sampler" && wait "$sampler"
      wrong=$(grep -o "Out of bounds values : [0-9]*" "$table" | grep -o "[0-9]*$")
      echo "$n ranks as hosts, $t with $lib: exit $rc, wrong ${wrong:-?}" | tee -a "$out/summary.txt"
      if [[ -n $traces ]]; then
        python3 "$here/../scripts/proxy-trace-summary.py" "$traces"/*.json > "$out/trace-net-$ranks-$t-$lib.txt" 2>&1 || echo "trace-net-$ranks-$t-$lib.txt: the summary failed" | tee -a "$out/summary.txt"
      fi
      ((rc == 0)) || status=1
      if ((rc == 0)); then
        drawn+=("$(label "$lib" "$table")=$(basename "$table")")
        # The first NCCL run that succeeded: the others' base.
        [[ -z $base && $lib == nccl* ]] && base=$(label "$lib" "$table")
      fi
    done
    # The picture and the comparison, from inside $out so that their notes name the tables
    # beside them.
    picture="net-$ranks-$t.svg" compare="compare-$ranks-$t.txt"
    if [[ ! -x "$here/oxccl-plot" ]]; then
      echo "$picture: not drawn, no $here/oxccl-plot (scripts/gpu-build.sh builds it)" | tee -a "$out/summary.txt"
    elif ((${#drawn[@]} > 0)); then
      if (cd "$out" && "$here/oxccl-plot" --title "$t, $n ranks posing as $hosts on $on under MPS, loopback sockets" --out "$picture" "${drawn[@]}") 2>>"$out/summary.txt"; then
        echo "$picture: ${#drawn[@]} lines" | tee -a "$out/summary.txt"
      else
        echo "$picture: oxccl-plot failed (its message is above)" | tee -a "$out/summary.txt"
        status=1
      fi
      if [[ -n $base ]] && ((${#drawn[@]} > 1)); then
        if (cd "$out" && "$here/oxccl-plot" --compare-to "$base" "${drawn[@]}") > "$out/$compare" 2>>"$out/summary.txt"; then
          sed -n '/^# time over/,$p' "$out/$compare" | sed "s/^/$ranks $t: /" | tee -a "$out/summary.txt"
        else
          echo "$compare: oxccl-plot failed (its message is above)" | tee -a "$out/summary.txt"
        fi
      fi
    fi
  done
done
exit $status
