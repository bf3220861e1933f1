/* The ULFM side of examples/ft_bench.rs: the same two scenarios on Open MPI 5 with
 * `mpirun --with-ft ulfm` (built by the benchmark with that installation's mpicc).
 * `kill`: rank n/2 SIGKILLs itself at step 20 of a loop of 64 KiB MPI_Allreduce; the
 * survivors print when their call failed, then MPIX_Comm_shrink and check an allreduce.
 * `revoke`: rank 0 revokes the communicator while the others wait in MPI_Allreduce.
 * Times are CLOCK_MONOTONIC nanoseconds, printed in the lines the benchmark reads. */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static long long now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    int count = 16384;
    float *buf = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    for (int i = 0; i < count; i++) buf[i] = 1.0f;
    if (argc > 1 && strcmp(argv[1], "kill") == 0) {
        int victim = n / 2;
        for (int step = 0;; step++) {
            if (rank == victim && step == 20) { printf("kill_at %lld\n", now_ns()); fflush(stdout); raise(SIGKILL); }
            int rc = MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, comm);
            if (rc != MPI_SUCCESS) {
                printf("detect_at %lld\n", now_ns());
                long long s0 = now_ns();
                MPI_Comm shrunk;
                MPIX_Comm_shrink(comm, &shrunk);
                long long s1 = now_ns();
                int size; double v = rank + 1, r = 0;
                MPI_Comm_size(shrunk, &size);
                MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, shrunk);
                double expected = 0;
                for (int i = 0; i < n; i++) expected += (i == victim) ? 0 : i + 1;
                if (size != n - 1 || r != expected) { fprintf(stderr, "rank %d: size %d sum %.0f after shrinking, expected %d and %.0f\n", rank, size, r, n - 1, expected); MPI_Abort(shrunk, 1); }
                printf("shrink_ns %lld size %d sum %.0f\n", s1 - s0, size, r);
                fflush(stdout);
                MPI_Comm_free(&shrunk);
                break;
            }
        }
    } else {
        MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, comm);
        if (rank == 0) {
            usleep(50000);
            printf("revoke_at %lld\n", now_ns());
            fflush(stdout);
            MPIX_Comm_revoke(comm);
        } else {
            int rc = MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, comm);
            printf("returned_at %lld rc %d\n", now_ns(), rc);
            fflush(stdout);
        }
    }
    MPI_Finalize();
    return 0;
}
