#!/usr/bin/env bash
# Installs what building and testing oxccl needs on Debian/Ubuntu, and only what is missing:
# a machine that has everything prints one line and changes nothing.
#
#   scripts/install-deps.sh            system packages (apt), and checks for cargo/nextest
#   scripts/install-deps.sh --python   also the NVRTC and CUDA-header wheels (pip), for
#                                      compiling CUDA kernels through NVRTC without a GPU
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

packages=(
  libopenmpi-dev openmpi-bin      # MPI bootstrap (rsmpi) and the mpirun tests (on one host, and across namespaced hosts)
  libclang-dev clang              # bindgen, for rsmpi and ibverbs-sys
  libhwloc-dev libudev-dev        # topology through hwlocality
  libibverbs-dev rdma-core        # the ibverbs feature
  cmake libnl-3-dev libnl-route-3-dev  # ibverbs-sys configures its vendored rdma-core with cmake
  pkg-config gfortran             # build glue, the Fortran example
  slurm-wlm munge                 # the srun tests: the single-host Slurm, and a Slurm of namespaced hosts
  iproute2                        # `ip` and `tc`: interfaces, and the simulated clusters' namespaces
  python3-pip                     # the NVRTC and CUDA-header wheels (--python)
)

# Commands that stand for the packages where there is no dpkg to ask (not Debian).
commands=(mpicc mpirun clang pkg-config gfortran cmake srun slurmctld slurmd munged ip tc)

python_wheels=(nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-crt nvidia-nccl-cu13)

main() {
  local python=0
  for arg in "$@"; do
    case $arg in
      --python) python=1 ;;
      -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
      *) die "unknown argument '$arg' (see --help)" ;;
    esac
  done

  local installed=()
  install_system_packages
  check_rust_tools
  if ((python)); then install_python_wheels; fi

  if ((${#installed[@]})); then
    log "installed ${installed[*]}"
  else
    log "nothing to install: everything needed is present"
  fi
}

# apt packages: one dpkg query for all of them; `apt-get update` only when something is
# missing, so that a complete machine never touches the network.
install_system_packages() {
  if ! command -v dpkg-query >/dev/null; then
    local missing_commands=()
    for c in "${commands[@]}"; do command -v "$c" >/dev/null || missing_commands+=("$c"); done
    if ((${#missing_commands[@]})); then
      die "not Debian/Ubuntu, and ${missing_commands[*]} missing: install the equivalents of ${packages[*]} by hand"
    fi
    return
  fi

  local missing=() status
  for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $status == installed ]] || missing+=("$p")
  done
  ((${#missing[@]})) || return 0

  command -v apt-get >/dev/null || die "missing ${missing[*]}, and no apt-get here: install them by hand"
  log "installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  installed+=("${missing[@]}")
}

# Rust itself comes from rustup, not apt. cargo-nextest is used when present (preinstalled on
# CI machines); scripts/test.sh falls back to `cargo test` without it rather than spending
# minutes building it from source here.
check_rust_tools() {
  command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup (https://rustup.rs)"
  if ! cargo nextest --version >/dev/null 2>&1; then
    log "note: cargo-nextest is not installed; scripts/test.sh will use cargo test" \
        "(get it with: curl -LsSf https://get.nexte.st/latest/linux | tar zxf - -C ~/.cargo/bin)"
  fi
}

# NVRTC and the CUDA headers from PyPI, so that CUDA kernels compile through NVRTC on a
# machine without CUDA (docs: /work/shared/reference/cuda-without-gpu.md). Checking costs one
# python start (~0.2 s); installing downloads a few hundred MB, so scripts/test.sh asks for it
# by default (OXCCL_TEST_NVRTC=0 skips them).
install_python_wheels() {
  command -v python3 >/dev/null || die "--python needs python3"
  local need
  mapfile -t need < <(python3 - "${python_wheels[@]}" <<'PY'
import importlib.metadata as metadata, sys
for name in sys.argv[1:]:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        print(name)
PY
  )
  ((${#need[@]})) || return 0
  log "pip installing ${need[*]}"
  local pip_args=(-q --disable-pip-version-check --root-user-action=ignore)
  # Debian's own python3 refuses pip installs (PEP 668); these wheels are plain data and
  # libraries, so they go to the user's site-packages there.
  if python3 -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_args+=(--user --break-system-packages)
  fi
  python3 -m pip install "${pip_args[@]}" "${need[@]}"
  installed+=("${need[@]}")
  log "CUDA wheels in $(nvidia_wheel_dir) (put its lib/ on LD_LIBRARY_PATH for NVRTC)"
}

main "$@"
