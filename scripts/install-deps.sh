#!/usr/bin/env bash
# Installs what building and testing oxccl needs on Debian/Ubuntu, and only what is missing:
# a machine that has everything prints one line and changes nothing.
#   scripts/install-deps.sh            system packages
#   scripts/install-deps.sh --python   also the NVRTC/CUDA-header wheels (for kernel compile checks)
set -euo pipefail

packages=(
  libopenmpi-dev openmpi-bin      # MPI bootstrap (rsmpi) and the mpirun tests
  libclang-dev clang              # rsmpi's bindgen
  libhwloc-dev libudev-dev        # topology through hwlocality
  libibverbs-dev rdma-core cmake  # the ibverbs feature (ibverbs-sys builds rdma-core with cmake)
  libnl-3-dev libnl-route-3-dev
  pkg-config gfortran             # build glue, the Fortran example
  slurm-wlm munge                 # the single-host Slurm of the srun tests
  iproute2
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "install-deps: missing ${missing[*]} and no apt-get here; install them by hand" >&2
    exit 1
  fi
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: system packages present"
fi

command -v cargo >/dev/null || { echo "install-deps: cargo is missing (install Rust with rustup)" >&2; exit 1; }

# NVRTC and CUDA headers from PyPI, so that CUDA kernels compile through NVRTC without a GPU.
if [[ "${1:-}" == "--python" ]]; then
  wheels=(nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-crt)
  need=()
  for w in "${wheels[@]}"; do python3 -m pip show -q "$w" >/dev/null 2>&1 || need+=("$w"); done
  if ((${#need[@]})); then
    echo "install-deps: pip installing ${need[*]}"
    python3 -m pip install -q "${need[@]}"
  fi
fi
