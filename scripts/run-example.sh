#!/usr/bin/env bash
# The README's run command: the main example, 4 ranks on this machine, no launcher, no GPU.
# Arguments go to the example (e.g. --nranks 8).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$OXCCL_ROOT"
scripts/install-deps.sh
# Ranks on one machine talk over loopback unless told otherwise.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
# Two cores here: more parallel rustc jobs only swap.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
exec cargo run --release --example allreduce -- "$@"
