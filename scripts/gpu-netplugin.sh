#!/usr/bin/env bash
# The machine's real NCCL over libnccl-net-oxccl.so (gpu-bin/netplugin/, from
# scripts/gpu-build.sh), against NCCL over its own socket transport, in the same run.
# Two MPI ranks pose as two hosts (each its own NCCL_HOSTID) on one GPU shared under MPS, so
# that NCCL sends everything through its network plugin; both on loopback
# (NCCL_SOCKET_IFNAME=lo). $1: the build directory of nccl-tests built with MPI=1 against
# the machine's NCCL (gpu-session.sh's nccl-tests stage makes .nccl-tests/build-mpi).
#
# For each socket setting (NETPLUGIN_SOCKET_SETTINGS, default "default 4x4": `default`
# leaves NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD unset, `TxS` sets them to T and S,
# for both nets, which both read them), each test (NETPLUGIN_TESTS), NETPLUGIN_ROUNDS rounds
# (default 2; OXCCL_NETPLUGIN_MAX_RECVS, when set, goes to the plugin's ranks;
# NETPLUGIN_ENV, "NAME=value ..." pairs, to both nets' ranks, e.g. NCCL_NET_SHARED_COMMS=0;
# NETPLUGIN_MPIRUN_ARGS to mpirun, e.g. "--bind-to none"; NETPLUGIN_RANK_WRAPPER, a
# command each rank runs its test under, e.g. scripts/perf-rank.sh, with NETPLUGIN_RUN
# naming the run as its output file does, <setting>-<test>-<net>-<round>), each running NCCL over the plugin (NCCL_NET_PLUGIN=oxccl NCCL_NET=oxccl) and
# over its socket transport (NCCL_NET_PLUGIN=none NCCL_NET=Socket), in alternating order,
# `-c 1` (results checked). Unset, NCCL's socket transport uses no helper thread (the proxy
# thread moves every byte; NCCL 2.28's net_socket.cc) and the plugin 1 thread x 1 socket.
# Writes under $OUT (or gpu-out/):
#   netplugin-<setting>-<test>-<net>-<round>.txt  nccl-tests' output with NCCL's INFO log
#                                       (INIT,NET)
#   netplugin-compare.txt               per setting, test and size: the best bus bandwidth
#                                       of each net over the rounds (out-of-place) and
#                                       plugin/socket
#   summary.txt                         per run: exit code, wrong values, whether NCCL's log
#                                       names the plugin and shows the setting's threads and
#                                       sockets in use by both nets; per setting and test: the
#                                       ratio over sizes of 1 MiB and more (geometric mean and
#                                       minimum); at the end the same ratios as one table
#   netplugin-pytorch-<net>.txt         with NETPLUGIN_PYTORCH=1, first: PyTorch's collectives
#                                       (examples/pytorch/check_collectives.py, every element
#                                       checked) over each net, two processes posing as hosts
# Exits non-zero when a run fails, has wrong values, or a run's log does not show NCCL using
# the plugin (plugin runs) or the threads and sockets the setting asks for. GPU clocks and modes are never touched; the MPS daemon this script
# starts (with pipes in a directory of its own) is stopped at the end.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: gpu-netplugin.sh <nccl-tests MPI=1 build directory>}"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
# NETPLUGIN_DIR: the plugin measured (default gpu-bin/netplugin; another build, for an A/B).
plugin_dir="${NETPLUGIN_DIR:-$here/netplugin}"
[[ -f $plugin_dir/libnccl-net-oxccl.so ]] || { echo "no $plugin_dir/libnccl-net-oxccl.so (run scripts/gpu-build.sh)" | tee -a "$out/summary.txt"; exit 1; }
status=0
note() { echo "$*" | tee -a "$out/summary.txt"; }

note "netplugin: machine NCCL $(grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH) ' /usr/include/nccl.h 2>/dev/null | awk '{printf "%s%s", sep, $3; sep="."}')"

# MPS, so that the two ranks' kernels run at once on the one GPU.
mps=$(mktemp -d)
export CUDA_MPS_PIPE_DIRECTORY="$mps/pipe" CUDA_MPS_LOG_DIRECTORY="$mps/log"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if ! nvidia-cuda-mps-control -d; then
  note "netplugin: the MPS daemon did not start; two ranks cannot share the GPU"
  exit 1
fi
# shellcheck disable=SC2317  # called by the EXIT trap
stop_mps() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; rm -rf "$mps"; }
trap stop_mps EXIT

export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
export NCCL_TESTS_DEVICE=0 CUDA_VISIBLE_DEVICES="${NETPLUGIN_GPU:-0}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(-b "${NCCL_TESTS_MIN:-8}" -e "${NCCL_TESTS_MAX:-64M}" -f "${NCCL_TESTS_FACTOR:-4}" -c 1 -n "${NCCL_TESTS_ITERS:-20}" -w 5 -g 1)

# The environment that puts NCCL on net $1 (plugin or socket), into the array net_env:
# NCCL_NET_PLUGIN and NCCL_NET, and for the plugin its folder first in LD_LIBRARY_PATH.
net_env_of() {
  if [[ $1 == plugin ]]; then
    net_env=(NCCL_NET_PLUGIN=oxccl NCCL_NET=oxccl "LD_LIBRARY_PATH=$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  else
    net_env=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
  fi
}

# Sets named to ", NCCL log names oxccl: yes" where NCCL's INFO lines in log $1 show the
# plugin loaded and the network in use; else to "... NO", and the script fails.
plugin_named() {
  if grep -q "NET/Plugin: Loaded net plugin oxccl" "$1" && grep -q "Using network oxccl" "$1"; then named=", NCCL log names oxccl: yes"; else named=", NCCL log names oxccl: NO"; status=1; fi
}

# One run of test $1 over net $2 (plugin or socket), round $3, socket setting $4 (`default`
# or TxS); its output file.
run() {
  local t=$1 net=$2 round=$3 setting=$4 table="$out/netplugin-$4-$1-$2-$3.txt" rc
  local threads="" sockets="" streams=() net_env=()
  if [[ $setting != default ]]; then
    threads=${setting%x*} sockets=${setting#*x}
    export NCCL_SOCKET_NTHREADS=$threads NCCL_NSOCKS_PERTHREAD=$sockets
    streams=(-x NCCL_SOCKET_NTHREADS -x NCCL_NSOCKS_PERTHREAD)
  else
    unset NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD
  fi
  net_env_of "$net"
  # The plugin's maxRecvs, where the caller sets it (8 unless set).
  [[ $net == plugin && -n ${OXCCL_NETPLUGIN_MAX_RECVS:-} ]] && streams+=(-x OXCCL_NETPLUGIN_MAX_RECVS)
  export NETPLUGIN_RUN="$setting-$t-$net-$round"
  streams+=(-x NETPLUGIN_RUN)
  [[ -n ${NETPLUGIN_RANK_WRAPPER:-} ]] && streams+=(-x NETPLUGIN_RANK_WRAPPER)
  local pair
  for pair in ${NETPLUGIN_ENV:-}; do
    export "${pair?}"
    streams+=(-x "${pair%%=*}")
  done
  # Each rank its own host: NCCL_HOSTID from the rank, set in the rank's own shell (which
  # also runs the test under NETPLUGIN_RANK_WRAPPER where one is given).
  # shellcheck disable=SC2016  # expanded by that shell
  env "${net_env[@]}" timeout "${NCCL_TESTS_TIMEOUT:-300}" mpirun --oversubscribe -np 2 ${NETPLUGIN_MPIRUN_ARGS:-} \
    -x LD_LIBRARY_PATH -x NCCL_NET_PLUGIN -x NCCL_NET -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME -x NCCL_DEBUG \
    -x NCCL_DEBUG_SUBSYS -x NCCL_TESTS_DEVICE -x CUDA_VISIBLE_DEVICES -x CUDA_MPS_PIPE_DIRECTORY "${streams[@]}" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    bash -c 'NCCL_HOSTID=netplugin-host$OMPI_COMM_WORLD_RANK exec ${NETPLUGIN_RANK_WRAPPER:-} "$@"' rank "$build/${t}_perf" "${args[@]}" > "$table" 2>&1
  rc=$?
  local wrong named="" streams_seen=""
  wrong=$(grep -o "Out of bounds values : [0-9]*" "$table" | grep -o "[0-9]*$")
  if [[ $net == plugin ]]; then
    plugin_named "$table"
    # The plugin's own line (through NCCL's logger): the threads and data sockets per comm.
    streams_seen=$(grep -o "[0-9]* helper thread(s) and [0-9]* data socket(s) per connection" "$table" | head -1)
    if [[ -n $threads ]] && [[ $streams_seen != "$threads helper thread(s) and $((threads * sockets)) data socket(s) per connection" ]]; then status=1; streams_seen="NOT THE SETTING: ${streams_seen:-no line}"; fi
  else
    # NCCL's socket transport logs its threads only when it has some (none by default).
    streams_seen=$(grep -o "NET/Socket: Using [0-9]* threads and [0-9]* sockets per thread" "$table" | head -1)
    if [[ -n $threads ]] && [[ $streams_seen != "NET/Socket: Using $threads threads and $sockets sockets per thread" ]]; then status=1; streams_seen="NOT THE SETTING: ${streams_seen:-no line}"; fi
  fi
  note "[$setting] $t over $net (round $round): exit $rc, wrong ${wrong:-?}$named, streams: ${streams_seen:-none logged}"
  if ((rc != 0)) || [[ ${wrong:-x} != 0 ]]; then status=1; fi
}

# PyTorch's collectives over each net (NETPLUGIN_PYTORCH=1): its "nccl" backend, two
# processes posing as hosts (POSE_HOSTS=1) on the GPU, every element checked.
if [[ ${NETPLUGIN_PYTORCH:-0} == 1 ]]; then
  for net in plugin socket; do
    log="$out/netplugin-pytorch-$net.txt"
    net_env_of "$net"
    env "${net_env[@]}" WORLD=2 POSE_HOSTS=1 timeout "${NCCL_TESTS_TIMEOUT:-300}" python3 "$here/../examples/pytorch/check_collectives.py" > "$log" 2>&1
    rc=$?
    named=""
    [[ $net == plugin ]] && plugin_named "$log"
    # 2 ranks x 2 sizes x 7 collectives, counted as marks (the two processes' lines can share one).
    oks=$(grep -o ': ok ' "$log" | wc -l)
    note "pytorch over $net: exit $rc, $oks checks passed (28 expected)$named"
    if ((rc != 0 || oks != 28)); then status=1; fi
  done
fi

# Out-of-place bus bandwidth by size from an nccl-tests output: "bytes busbw" lines.
busbw() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 && $8 ~ /^[0-9.]+$/ { print $1, $8 }' "$1"
}

: > "$out/netplugin-compare.txt"
: > "$out/.ratios"
rounds=${NETPLUGIN_ROUNDS:-2}
for setting in ${NETPLUGIN_SOCKET_SETTINGS:-default 4x4}; do
  if [[ $setting != default && ! $setting =~ ^[0-9]+x[0-9]+$ ]]; then note "netplugin: socket setting $setting is neither default nor TxS"; status=1; continue; fi
  for t in ${NETPLUGIN_TESTS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}; do
    for ((round = 1; round <= rounds; round++)); do
      if ((round % 2)); then order=(plugin socket); else order=(socket plugin); fi
      for net in "${order[@]}"; do run "$t" "$net" "$round" "$setting"; done
    done
    # Best of the rounds per size, each net; then plugin / socket.
    for net in plugin socket; do
      for ((round = 1; round <= rounds; round++)); do busbw "$out/netplugin-$setting-$t-$net-$round.txt"; done \
        | awk '{ if (!($1 in best) || $2 > best[$1]) best[$1] = $2 } END { for (s in best) print s, best[s] }' | sort -n > "$out/.best-$net"
    done
    # bytes, plugin, socket: the sizes both nets ran.
    awk 'NR == FNR { plugin[$1] = $2; next } $1 in plugin { print $1, plugin[$1], $2 }' "$out/.best-plugin" "$out/.best-socket" | sort -n > "$out/.both"
    {
      echo "# [$setting] $t: bytes, bus bandwidth GB/s over libnccl-net-oxccl.so, over NCCL's socket transport, ratio (best of $rounds rounds, out-of-place)"
      awk '{ printf "%12d %9.3f %9.3f %7.3f\n", $1, $2, $3, ($3 > 0 ? $2 / $3 : 0) }' "$out/.both"
    } >> "$out/netplugin-compare.txt"
    awk -v t="$t" -v setting="$setting" '
      $1 >= 1048576 && $3 > 0 { r = $2 / $3; n++; s += log(r); if (n == 1 || r < m) m = r }
      END { if (n) printf "[%s] %s plugin/socket bus bandwidth, sizes >= 1 MiB: geometric mean %.3fx, minimum %.3fx over %d sizes\n", setting, t, exp(s / n), m, n;
            else printf "[%s] %s: no sizes >= 1 MiB to compare\n", setting, t }' "$out/.both" | tee -a "$out/summary.txt" >> "$out/.ratios"
  done
done
# The ratios again, one line per test, one column per setting: "geometric mean (minimum)".
note "netplugin: plugin/socket bus bandwidth from 1 MiB, geometric mean (minimum), by socket setting"
awk '
  match($0, /^\[[^]]*\] [a-z_]+ plugin/) {
    split(substr($0, 2), head, /\] /); setting = head[1]; split(head[2], words, " "); t = words[1]
    if (!(setting in seen)) { seen[setting] = 1; settings[++ns] = setting }
    if (!(t in tseen)) { tseen[t] = 1; tests[++nt] = t }
    match($0, /mean [0-9.]+x/); mean = substr($0, RSTART + 5, RLENGTH - 6)
    match($0, /minimum [0-9.]+x/); min = substr($0, RSTART + 8, RLENGTH - 9)
    cell[setting, t] = mean " (" min ")"
  }
  END {
    line = sprintf("%-16s", "test"); for (i = 1; i <= ns; i++) line = line sprintf(" %-18s", settings[i]); print line
    for (j = 1; j <= nt; j++) { line = sprintf("%-16s", tests[j]); for (i = 1; i <= ns; i++) line = line sprintf(" %-18s", ((settings[i], tests[j]) in cell) ? cell[settings[i], tests[j]] : "-"); print line }
  }' "$out/.ratios" | tee -a "$out/summary.txt"
rm -f "$out/.best-plugin" "$out/.best-socket" "$out/.both" "$out/.ratios"
exit $status
