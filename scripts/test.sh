#!/usr/bin/env bash
# The README's test command: installs what is missing, starts a one-node Slurm for the srun
# tests, runs every test of the workspace (release build), and builds the optional features.
# Every multi-process test has its own hard timeout; the whole run fits in ~25 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# Nothing a test does may leave loopback: MPI's own traffic included.
export NCCL_SOCKET_IFNAME=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR=never

if [[ $(id -u) -eq 0 ]]; then
  slurm/start-single-host.sh
  trap 'slurm/stop-single-host.sh >/dev/null 2>&1 || true' EXIT
  export OXCCL_TEST_SLURM=1
else
  echo "test: not root, so no single-host Slurm: the srun tests will say they are skipped" >&2
fi

echo "== building the optional features"
cargo build --release -p oxccl-transports --features ibverbs

echo "== running the test suite"
cargo test --workspace --release --all-targets "$@"
cargo test --workspace --release --doc
