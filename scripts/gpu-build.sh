#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), what the GPU machine runs: the release test
# binaries that touch CUDA and the benchmarks, stripped, into gpu-bin/ (git-ignored),
# together with scripts/gpu-run.sh. The GPU machine (Ubuntu 24.04, CUDA 13, no Rust) runs
# `bash gpu-bin/gpu-run.sh`, which writes every result under $OUT (or gpu-out/).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$OXCCL_ROOT"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

rm -rf gpu-bin
mkdir -p gpu-bin
# The test binaries, found through cargo's JSON messages.
cargo test --release -p oxccl-kernels -p oxccl-runtime -p oxccl-capi --no-run --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do
  case $name in gpu|nvrtc|gpu_collectives|gpu_calls) strip -o "gpu-bin/$name" "$exe" ;; esac
done
cargo build --release -p oxccl-bench --bin oxccl-perf --bin oxccl-topo --bin oxccl-plot
strip -o gpu-bin/oxccl-perf target/release/oxccl-perf
strip -o gpu-bin/oxccl-topo target/release/oxccl-topo
# Draws gpu-net-bench.sh's tables as SVG pictures.
strip -o gpu-bin/oxccl-plot target/release/oxccl-plot
# oxccl's libnccl.so.2, for NCCL-linked programs (nccl-tests) put first on LD_LIBRARY_PATH.
cargo build --release -p oxccl-capi
mkdir -p gpu-bin/lib
strip -o gpu-bin/lib/libnccl.so.2 target/release/libnccl.so
cp scripts/gpu-*.sh gpu-bin/
# The project's own tuner plugin (ABI v5: what NCCL 2.28 reads), for gpu-tuner-compare.sh.
cc -shared -fPIC -O2 -DTUNER_ABI=5 -o gpu-bin/lib/libnccl-tuner-rules.so tuning/tests/plugin/rules_tuner.c
# libnccl-net-oxccl.so, oxccl's socket net as an NCCL net plugin, for the machine's NCCL
# (NCCL_NET_PLUGIN=oxccl finds it on LD_LIBRARY_PATH). Beside lib/, not in it: runs of the
# real NCCL put this directory on the path, and lib/ holds oxccl's libnccl.so.2.
cargo build --release -p oxccl-netplugin
mkdir -p gpu-bin/netplugin
strip -o gpu-bin/netplugin/libnccl-net-oxccl.so target/release/libnccl_net_oxccl.so
ls -la gpu-bin >&2
du -sh gpu-bin >&2
