// What a pure ACK costs a small message over loopback TCP: two threads (cores 0 and 1)
// ping-pong `size`-byte messages over non-blocking sockets, busy-polled, and print the
// one-way time (median, 10th and 90th percentile of 20000 round trips / 2).
//   mode 0: one connection both ways (each message's ACK rides on the reply);
//   mode 1: a connection each way, as a Net's send and receive comms are (each message
//           is acknowledged on its own, from the read that takes it);
//   mode 3: as 1 with TCP_QUICKACK turned off once on every socket;
//   mode 5: as 1, the receiver taking each message with MSG_PEEK and discarding it
//           (MSG_TRUNC) only after it replied: the ACK leaves after the message was used,
//           as oxccl's socket Net receives small messages (docs/NET.md).
// Build: cc -O2 -o tcp-ack-pingpong scripts/tcp-ack-pingpong.c -lpthread
// Run:   ./tcp-ack-pingpong MODE [SIZE, default 20]
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 20000, MAX_SIZE = 65536 };
static int mode, size = 20, listener, port;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static int prepared(int fd) {
  int one = 1, zero = 0;
  if (fd < 0) die("socket");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (mode == 3) setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof zero);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&to, sizeof to)) die("connect");
  return prepared(fd);
}

// Waits for a whole message: read (modes 0, 1, 3) or peeked (mode 5: left in the socket).
static void take(int fd, char *buf) {
  int got = 0;
  while (got < size) {
    int n = mode == 5 ? recv(fd, buf, size, MSG_PEEK) : recv(fd, buf + got, size - got, 0);
    if (n == 0) exit(2);
    if (n < 0 && errno != EAGAIN) die("recv");
    if (n > 0) got = mode == 5 ? n : got + n;
  }
}

// Mode 5: drops the peeked message from the socket (its ACK goes now).
static void settle(int fd, char *buf) {
  if (mode == 5 && recv(fd, buf, size, MSG_TRUNC) != size) die("discard");
}

static void put(int fd, const char *buf) {
  int sent = 0;
  while (sent < size) {
    int n = send(fd, buf + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) die("send");
    if (n > 0) sent += n;
  }
}

static void *echo(void *unused) {
  (void)unused;
  pin(1);
  int in = prepared(accept(listener, 0, 0)), out = mode ? prepared(accept(listener, 0, 0)) : in;
  static char buf[MAX_SIZE];
  for (int i = 0; i < ROUNDS; i++) {
    take(in, buf);
    put(out, buf);
    settle(in, buf);
  }
  return 0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODE(0|1|3|5) [SIZE]\n", argv[0]);
    return 1;
  }
  mode = atoi(argv[1]);
  if (argc > 2) size = atoi(argv[2]);
  if (size < 1 || size > MAX_SIZE || (mode != 0 && mode != 1 && mode != 3 && mode != 5)) {
    fprintf(stderr, "mode 0, 1, 3 or 5 and a size of 1..%d bytes\n", MAX_SIZE);
    return 1;
  }
  // Every wait here spins: a run that stalls (a peer thread gone) ends after a minute.
  alarm(60);
  listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof at;
  if (bind(listener, (struct sockaddr *)&at, sizeof at) || listen(listener, 4) || getsockname(listener, (struct sockaddr *)&at, &len)) die("listen");
  port = ntohs(at.sin_port);
  pthread_t thread;
  pthread_create(&thread, 0, echo, 0);
  pin(0);
  int out = dial(), in = mode ? dial() : out;
  static char buf[MAX_SIZE];
  memset(buf, 1, sizeof buf);
  double *times = malloc(ROUNDS * sizeof(double));
  for (int i = 0; i < ROUNDS; i++) {
    double start = now_us();
    put(out, buf);
    take(in, buf);
    times[i] = now_us() - start;
    settle(in, buf);
  }
  pthread_join(thread, 0);
  qsort(times, ROUNDS, sizeof(double), by_value);
  printf("mode %d size %d: one way median %.2f us p10 %.2f p90 %.2f\n", mode, size, times[ROUNDS / 2] / 2, times[ROUNDS / 10] / 2, times[9 * ROUNDS / 10] / 2);
  return 0;
}
