#!/usr/bin/env bash
# On the GPU machine: the project's own tuner plugin (gpu-bin/lib/libnccl-tuner-rules.so,
# built by scripts/gpu-build.sh from tuning/tests/plugin/rules_tuner.c, ABI v5, which NCCL
# 2.28 reads) loaded by the machine's NCCL 2.28 and by oxccl makes the same choices.
# Two ranks share GPU 0, posing as two hosts (NCCL_HOSTID), over the socket transport on
# lo: the setup of shared/reference/topo. Four runs of gpu-tuner-compare (built here with
# the machine's cc, nccl.h and CUDA), each printing the library's TUNING line per call:
#   nccl-plain, nccl-plugin   NCCL 2.28 without and with the plugin
#   oxccl-plugin              oxccl's libnccl.so.2 with the plugin (GPU ranks on different
#                             "hosts": the network kernels' tuner chooses, the plugin editing
#                             its table)
# and oxccl-topo's predictions for the same machine (NCCL's model, 2 ranks over 2 hosts,
# on NCCL's topology dump of the first run),
# without and with the plugin. Compared per (collective, bytes):
#   nccl-plugin = oxccl-plugin   the plugin decides the same in both libraries
#   nccl-plain  = topo-plain     oxccl's NCCL model chooses as NCCL does here
#   nccl-plugin = topo-plugin
# With two GPUs or more, also one host (no NCCL_HOSTID: ranks on GPUs 0 and 1), rules that
# name only the ring (what oxccl's kernels run there), NCCL and oxccl with the plugin:
#   nccl-plugin-1h = oxccl-plugin-1h
# Results under $OUT (or gpu-out/): the logs, the parsed choice tables, compare.txt.
set -uo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
bin="$root/gpu-bin"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
cuda="${CUDA_HOME:-/usr/local/cuda}"
lo=${TUNER_MIN:-8}; hi=${TUNER_MAX:-4194304}
prog="$out/gpu-tuner-compare"
if ! cc -O2 -I"$cuda/include" -o "$prog" "$root/scripts/gpu-tuner-compare.c" -L"$cuda/lib64" -lcudart -lnccl > "$out/tuner-build.txt" 2>&1; then
  echo "building gpu-tuner-compare failed (needs cc, nccl.h, CUDA): see tuner-build.txt" | tee "$out/compare.txt"; exit 1
fi
rules="$out/tuner-rules.conf"
cat > "$rules" <<'RULES'
allreduce,0,65536,tree,simple,-1,2
allreduce,65537,1099511627776,ring,simple,-1,2
broadcast,0,1099511627776,ring,simple,-1,2
reduce,0,1099511627776,ring,simple,-1,2
allgather,0,1099511627776,ring,simple,-1,2
reducescatter,0,1099511627776,ring,simple,-1,2
RULES
plugin="$bin/lib/libnccl-tuner-rules.so"
common=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_TUNER_CONFIG_FILE="$rules" OXCCL_BACKEND=gpu)
run() { # name, library path prefix, plugin setting (ONE_HOST=1: no NCCL_HOSTID)
  local name=$1 libpath=$2 tuner=$3 id="$out/id-$1"
  rm -f "$id"
  for r in 0 1; do
    env "${common[@]}" ${NCCL_TOPO_DUMP_FILE:+NCCL_TOPO_DUMP_FILE="$NCCL_TOPO_DUMP_FILE"} NCCL_TUNER_PLUGIN="$tuner" $([[ ${ONE_HOST:-0} == 1 ]] || echo NCCL_HOSTID="host$r") LD_LIBRARY_PATH="$libpath$cuda/lib64:${LD_LIBRARY_PATH:-}" \
      timeout 300 "$prog" $r 2 "$id" "$lo" "$hi" > "$out/$name-rank$r.log" 2>&1 &
  done
  wait
  grep -oE "(AllReduce|Broadcast|Reduce|AllGather|ReduceScatter): [0-9]+ Bytes -> Algo [A-Za-z]+ proto [A-Za-z0-9]+" "$out/$name-rank0.log" \
    | awk '{print $1, $2, $6, $8}' | sed 's/://' | sort -u > "$out/$name.choices"
  echo "$name: $(wc -l < "$out/$name.choices") choices"
}
NCCL_TOPO_DUMP_FILE="$out/nccl-topo.xml" run nccl-plain "" none
run nccl-plugin "" "$plugin"
run oxccl-plugin "$bin/lib:" "$plugin"
# oxccl-topo prints "collective bytes algorithm protocol channels time"; NCCL prints the
# bytes of the user's count (per rank for all_gather and reduce_scatter), oxccl-topo NCCL's
# tuning bytes (x2 ranks there): bring them to NCCL's. The machine as NCCL saw it in that
# run (its dump: a posed host holds the GPU both ranks share), loaded by oxccl-topo; on a
# machine of several GPUs oxccl-topo's own discovery gives each host all of them, which
# 2 ranks over 2 hosts cannot be.
topo() {
  "$bin/oxccl-topo" --topo-file "$out/nccl-topo.xml" --nranks 2 --nnodes 2 -b "$lo" -e "$((hi * 2))" -f 2 --choices-only --tuner-plugin "$1" 2>/dev/null \
    | awk '$1 ~ /^(AllReduce|Broadcast|Reduce|AllGather|ReduceScatter)$/ {b=$2; if ($1=="AllGather"||$1=="ReduceScatter") b=b/2; print $1, b, $3, $4}' | sort -u
}
NCCL_TUNER_CONFIG_FILE="$rules" topo none > "$out/topo-plain.all"
NCCL_TUNER_CONFIG_FILE="$rules" topo "$plugin" > "$out/topo-plugin.all"
# Discovery on this machine: oxccl-topo's full view (a rank per GPU) and its XML, beside
# NCCL's own dump (informational diff: host_hash and the net's name differ by design, and
# NCCL's posed host has only the GPU its ranks share).
"$bin/oxccl-topo" --dump-xml "$out/oxccl-topo.xml" --svg "$out/oxccl-topo.svg" -b 8 -e 64M -f 8 > "$out/oxccl-topo.txt" 2>&1
echo "oxccl-topo (discovery): exit $?" | tee "$out/discovery.txt"
diff -u "$out/nccl-topo.xml" "$out/oxccl-topo.xml" > "$out/topo-diff.txt"
status=0
compare() { # a, b: lines of a whose (collective, bytes) b also has
  join -j1 <(awk '{print $1"/"$2, $3"/"$4}' "$out/$1" | sort) <(awk '{print $1"/"$2, $3"/"$4}' "$out/$2" | sort) > "$out/$1-vs-$2.txt"
  local n differ
  n=$(wc -l < "$out/$1-vs-$2.txt"); differ=$(awk 'toupper($2) != toupper($3)' "$out/$1-vs-$2.txt" | wc -l)
  echo "$1 vs $2: $n calls compared, $differ differ" | tee -a "$out/compare.txt"
  awk 'toupper($2) != toupper($3) {print "  " $0}' "$out/$1-vs-$2.txt" | tee -a "$out/compare.txt"
  ((n > 0 && differ == 0)) || status=1
}
: > "$out/compare.txt"
compare nccl-plugin.choices oxccl-plugin.choices
compare nccl-plain.choices topo-plain.all
compare nccl-plugin.choices topo-plugin.all
if (($(nvidia-smi -L | wc -l) >= 2)); then
  cat > "$rules" <<'RULES'
allreduce,0,65536,ring,ll,-1,2
allreduce,65537,1099511627776,ring,simple,-1,2
broadcast,0,1099511627776,ring,simple,-1,2
reduce,0,1099511627776,ring,simple,-1,2
allgather,0,1099511627776,ring,simple,-1,2
reducescatter,0,1099511627776,ring,ll,-1,2
RULES
  ONE_HOST=1 run nccl-plugin-1h "" "$plugin"
  ONE_HOST=1 run oxccl-plugin-1h "$bin/lib:" "$plugin"
  compare nccl-plugin-1h.choices oxccl-plugin-1h.choices
fi
exit $status
