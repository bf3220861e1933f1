// An LD_PRELOAD library that counts, by thread, the socket calls a process makes through
// libc (send, sendto, sendmsg, recv, recvfrom, recvmsg: what NCCL's socket transport and
// oxccl's socket Net move bytes with; read and write are not counted) and its sched_yield,
// poll and ioctl(FIONREAD) calls: how many, how many moved no byte (EAGAIN), the bytes
// moved, and the calls that moved bytes by size (powers of two). For the GPU machine,
// which has neither perf nor strace: which net makes more system calls a byte under NCCL's
// proxy. At exit it writes $SOCKET_CALLS_DIR/<pid>.txt (nothing without SOCKET_CALLS_DIR).
//
//   cc -shared -fPIC -O2 -o libsocket-call-counter.so scripts/socket-call-counter.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { SEND, SENDTO, SENDMSG, RECV, RECVFROM, RECVMSG, YIELD, POLL, FIONREAD_, CALLS };
static const char *call_names[CALLS] = {"send", "sendto", "sendmsg", "recv", "recvfrom", "recvmsg", "sched_yield", "poll", "ioctl_FIONREAD"};
enum { BUCKETS = 32 };

struct counts {
  char name[16];
  long tid;
  unsigned long since_named;
  unsigned long calls[CALLS], empty[CALLS], bytes[CALLS];
  unsigned long by_size[CALLS][BUCKETS];
};

enum { SLOTS = 512 };
static struct counts slots[SLOTS];
static atomic_int used;
static __thread struct counts *mine;

static struct counts *counts(void) {
  if (!mine) {
    int slot = atomic_fetch_add(&used, 1);
    if (slot >= SLOTS) return NULL;
    mine = &slots[slot];
    mine->tid = syscall(SYS_gettid);
  }
  // A thread is named after its first calls (NCCL names its proxy thread once started):
  // read the name again every 1024 calls.
  if (mine->since_named++ % 1024 == 0) prctl(PR_GET_NAME, mine->name);
  return mine;
}

static void count(int which, ssize_t moved) {
  struct counts *c = counts();
  if (!c) return;
  c->calls[which]++;
  if (moved <= 0) {
    c->empty[which]++;
    return;
  }
  c->bytes[which] += (unsigned long)moved;
  int bucket = 0;
  while (bucket + 1 < BUCKETS && (1UL << (bucket + 1)) <= (unsigned long)moved) bucket++;
  c->by_size[which][bucket]++;
}

#define REAL(ret, fn, ...) \
  static ret (*real)(__VA_ARGS__); \
  if (!real) real = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #fn)

// A counted socket call: `fn` with parameters `params` (their types `types`, their names
// `args`), counted as `which` by what it returned.
#define COUNTED(fn, which, types, params, args) \
  ssize_t fn params { \
    REAL(ssize_t, fn, EXPAND types); \
    ssize_t r = real args; \
    int saved = errno; \
    count(which, r); \
    errno = saved; \
    return r; \
  }
#define EXPAND(...) __VA_ARGS__

COUNTED(send, SEND, (int, const void *, size_t, int), (int fd, const void *buf, size_t len, int flags), (fd, buf, len, flags))
COUNTED(sendto, SENDTO, (int, const void *, size_t, int, const struct sockaddr *, socklen_t),
        (int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen), (fd, buf, len, flags, to, tolen))
COUNTED(sendmsg, SENDMSG, (int, const struct msghdr *, int), (int fd, const struct msghdr *msg, int flags), (fd, msg, flags))
COUNTED(recv, RECV, (int, void *, size_t, int), (int fd, void *buf, size_t len, int flags), (fd, buf, len, flags))
COUNTED(recvfrom, RECVFROM, (int, void *, size_t, int, struct sockaddr *, socklen_t *),
        (int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen), (fd, buf, len, flags, from, fromlen))
COUNTED(recvmsg, RECVMSG, (int, struct msghdr *, int), (int fd, struct msghdr *msg, int flags), (fd, msg, flags))

int sched_yield(void) {
  REAL(int, sched_yield, void);
  count(YIELD, 1);
  return real();
}

int poll(struct pollfd *fds, nfds_t n, int timeout) {
  REAL(int, poll, struct pollfd *, nfds_t, int);
  int r = real(fds, n, timeout);
  int saved = errno;
  count(POLL, r);
  errno = saved;
  return r;
}

// glibc declares ioctl with an unsigned long request; FIONREAD's argument is an int *.
int ioctl(int fd, unsigned long request, ...) {
  REAL(int, ioctl, int, unsigned long, void *);
  va_list args;
  va_start(args, request);
  void *arg = va_arg(args, void *);
  va_end(args);
  int r = real(fd, request, arg);
  int saved = errno;
  if (request == FIONREAD) count(FIONREAD_, r == 0 && arg ? *(int *)arg : 0);
  errno = saved;
  return r;
}

__attribute__((destructor)) static void report(void) {
  const char *dir = getenv("SOCKET_CALLS_DIR");
  if (!dir || atomic_load(&used) == 0) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%d.txt", dir, (int)getpid());
  FILE *out = fopen(path, "w");
  if (!out) return;
  char argv0[256] = "";
  FILE *cmd = fopen("/proc/self/cmdline", "r");
  if (cmd) {
    size_t got = fread(argv0, 1, sizeof argv0 - 1, cmd);
    argv0[got] = 0;
    fclose(cmd);
  }
  fprintf(out, "# pid %d %s NCCL_NET=%s\n", (int)getpid(), argv0, getenv("NCCL_NET") ? getenv("NCCL_NET") : "-");
  fprintf(out, "# thread tid call calls empty bytes | size-bucket:count (bucket b: 2^b to 2^(b+1)-1 bytes)\n");
  int n = atomic_load(&used);
  for (int s = 0; s < n && s < SLOTS; s++) {
    struct counts *c = &slots[s];
    for (int k = 0; k < CALLS; k++) {
      if (!c->calls[k]) continue;
      char name[16];
      memcpy(name, c->name, sizeof name);
      name[sizeof name - 1] = 0;
      if (!name[0]) strcpy(name, "?");
      for (char *p = name; *p; p++)
        if (*p == ' ') *p = '_';
      fprintf(out, "%s %ld %s %lu %lu %lu |", name, c->tid, call_names[k], c->calls[k], c->empty[k], c->bytes[k]);
      for (int b = 0; b < BUCKETS; b++)
        if (c->by_size[k][b]) fprintf(out, " %d:%lu", b, c->by_size[k][b]);
      fprintf(out, "\n");
    }
  }
  fclose(out);
}
