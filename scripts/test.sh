#!/usr/bin/env bash
# The README's test command: installs what is missing, starts a one-node Slurm for the srun
# tests, runs every test of the workspace (release build), builds the ibverbs feature and
# runs the doctests and the loom model checks. The exit code is non-zero when any of these
# fails. Arguments go to the test runner (a filter, e.g. `scripts/test.sh launchers`).
#
# Knobs: CARGO_BUILD_JOBS (default 2: the suite must fit in ~25 min on 2 cores without
# starving the multi-process tests), OXCCL_TEST_THREADS (tests run at once, default: nextest's,
# one per core), OXCCL_TEST_SLURM=0 (deliberately run without Slurm: the srun tests, on the
# one-node Slurm and on a simulated cluster's, then say they are skipped), OXCCL_TEST_NVRTC=0
# (do not install the NVRTC and CUDA-header wheels; the NVRTC test then fails unless a CUDA
# toolkit is installed), OXCCL_TEST_NETNS=0 (deliberately run without network namespaces,
# e.g. not as root: the tests of simulated clusters then say they are skipped; otherwise such
# a test fails when it cannot make them).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$OXCCL_ROOT"

if [[ ${OXCCL_TEST_NVRTC:-1} == 1 ]]; then
  scripts/install-deps.sh --python
else
  scripts/install-deps.sh
fi

# Every CUDA kernel compiles through NVRTC here (no GPU): a CUDA toolkit's, or the PyPI
# wheels' libnvrtc and headers.
if [[ -z ${CUDA_HOME:-} && ! -f /usr/local/cuda/include/cuda_fp16.h ]]; then
  wheel=$(nvidia_wheel_dir)
  if [[ -n $wheel ]]; then
    export CUDA_HOME=$wheel
    export LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
elif [[ -z ${CUDA_HOME:-} ]]; then
  export CUDA_HOME=/usr/local/cuda
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Nothing a test does may leave loopback, MPI's and PMIx's own traffic included: this
# machine's other addresses are never a target.
export NCCL_SOCKET_IFNAME=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export PMIX_MCA_ptl_tcp_if_include=lo
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# The srun tests need a running Slurm (and munged, which it starts: a simulated cluster's
# Slurm authenticates through it too). A Slurm that does not come up fails the run: skipping
# those tests silently would report a green suite that tested less.
slurm_held=0
backstop=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [[ -z $backstop ]] || rm -f "$backstop"
  if ((slurm_held)); then slurm_release; fi
}
# Signals end the script through exit, so that the EXIT trap still cleans up.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ ${OXCCL_TEST_SLURM:-} == 0 ]]; then
  log "OXCCL_TEST_SLURM=0: running WITHOUT Slurm; the srun tests will be skipped"
else
  slurm_held=1
  slurm_acquire || die "the single-host Slurm did not start (see above); set OXCCL_TEST_SLURM=0 to run without it"
  export OXCCL_TEST_SLURM=1
fi

# Each step runs even when an earlier one failed, so one run shows every failure; the script
# exits with the first failing step's code.
status=0
results=()
step() {
  local name=$1 rc=0 start=$SECONDS
  shift
  echo "== $name: $*" >&2
  "$@" || rc=$?
  results+=("$(printf '%-12s %s (%ds)' "$name" "$( ((rc)) && echo "FAILED, exit $rc" || echo ok)" $((SECONDS - start)))")
  if ((rc && !status)); then status=$rc; fi
}

step docs scripts/check-docs.sh
if cargo nextest --version >/dev/null 2>&1; then
  # A backstop for a test that hangs: nextest kills it after 10 minutes (the multi-process
  # tests have their own, shorter, timeouts), the NVRTC test after 20: it compiles every
  # kernel specialisation, 8 minutes on a 2-core VM beside the other tests. The
  # repository's .config/nextest.toml, when there is one, overrides this.
  backstop=$(mktemp --suffix=.toml)
  printf '[profile.default]\nslow-timeout = { period = "60s", terminate-after = 10 }\n[[profile.default.overrides]]\nfilter = "test(every_specialisation_compiles_for_sm_90_and_is_cached)"\nslow-timeout = { period = "60s", terminate-after = 20 }\n' > "$backstop"
  runner=(cargo nextest run --workspace --release --no-fail-fast
          --tool-config-file "oxccl-test-sh:$backstop")
  [[ -z ${OXCCL_TEST_THREADS:-} ]] || runner+=(--test-threads "$OXCCL_TEST_THREADS")
  step tests "${runner[@]}" "$@"
  # nextest does not run doctests.
  step doctests cargo test --workspace --release --doc
else
  threads=()
  [[ -z ${OXCCL_TEST_THREADS:-} ]] || threads=(--test-threads "$OXCCL_TEST_THREADS")
  step tests cargo test --workspace --release --all-targets --no-fail-fast "$@" -- "${threads[@]}"
  step doctests cargo test --workspace --release --doc
fi

# The lock-free protocols (shared-memory FIFO, proxy inbox) under the loom model checker, in
# a target directory of their own: cfg(loom) would otherwise rebuild the main one.
step loom env CARGO_TARGET_DIR="$OXCCL_ROOT/target/loom" RUSTFLAGS="--cfg loom" \
  cargo test -p oxccl-transports --release --lib loom

# The RDMA feature builds (no machine here has an RDMA NIC to run it). Release, so that it
# reuses the test build's dependencies.
step ibverbs cargo build --release -p oxccl-transports --features ibverbs

echo "== summary" >&2
printf '   %s\n' "${results[@]}" >&2
exit "$status"
