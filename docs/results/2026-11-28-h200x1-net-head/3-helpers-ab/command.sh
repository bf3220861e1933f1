# The call ran gpu-bin/ab-helpers.sh as it stands in
# docs/results/2026-11-28-h200x2-net-hosts/4-sockets-4x4/command.sh, before that copy
# gained LIBS (unset there: the libraries "oxccl oxccl-env-nohelp nccl", as here) and the
# unused NET_ENV_s44; from the repository root with gpu-bin/ and .nccl-tests/ carried:
TAG=h1-3 LAYOUTS="2x1 4x1" bash gpu-bin/ab-helpers.sh
