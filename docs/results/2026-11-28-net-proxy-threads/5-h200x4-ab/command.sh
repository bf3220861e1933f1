# This call ran ../3-h200x2-ab/command.sh (as gpu-bin/x4-a.sh) with these edits:
#   the tar file x4a.tgz; make ... -j 64; one round (`for round in 1`) of the layouts
#   `4x1 4x2`; and after the rounds, 4 ranks as 2 hosts of 2 at 8 B..32 MiB, oxccl against
#   NCCL at its defaults and at 4x4:
#     OUT=$r/full-l4x2 NET_SAMPLE=1 NET_PER_HOST=2 NET_RANKS=4 NET_MAX=32M NET_TIMEOUT=60 bash gpu-bin/gpu-net-bench.sh $nt/build-mpi
#   (the final grep reads $r/*/summary.txt).
bash gpu-bin/x4-a.sh
