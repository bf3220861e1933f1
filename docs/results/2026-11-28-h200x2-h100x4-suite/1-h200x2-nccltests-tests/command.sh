set -u; start=$SECONDS
GPU_SESSION_TAG=nt NCCL_TESTS_MAX=256M timeout 300 bash gpu-bin/gpu-session.sh nccl-tests pytorch | tail -4
echo "nccl-tests+pytorch $((SECONDS-start)) s"
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=250 GPU_TEST_FILTERS="p2p:: plans:: large_messages the_kernel_timeline ranks_as_threads" timeout 260 bash gpu-bin/gpu-session.sh tests | tail -3
echo "total $((SECONDS-start)) s"
