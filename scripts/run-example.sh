#!/usr/bin/env bash
# The README's run command: the main example, 4 ranks on this machine, no launcher, no GPU.
# Arguments go to the example (e.g. --nranks 8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Ranks on one machine talk over loopback unless told otherwise.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
exec cargo run --release --example allreduce -- "$@"
