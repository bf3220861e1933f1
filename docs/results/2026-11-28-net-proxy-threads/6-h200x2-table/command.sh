# This call ran ../3-h200x2-ab/command.sh (as gpu-bin/x2-c.sh) with these edits: the tar
# file x2c.tgz, packed every 20 s; no rounds; each layout (2x1, 4x2) once at 8 B..32 MiB
# with gpu-net-bench.sh's default libraries (oxccl, NCCL at its defaults and at 4x4):
#     OUT=$r/full-l$layout NET_SAMPLE=1 NET_PER_HOST=$h NET_RANKS=$n NET_MAX=32M NET_TIMEOUT=40 bash gpu-bin/gpu-net-bench.sh $nt/build-mpi
#   (the final grep reads $r/*/summary.txt).
bash gpu-bin/x2-c.sh
