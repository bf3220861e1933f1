// Wake-up latency behind a busy thread: how long a thread blocked in poll(2) takes to run
// once woken when another thread spins on its CPU, without yielding (as a CUDA host thread
// spin-waiting on a stream does) or yielding (as oxccl's proxy threads poll). The socket
// Net's helper threads and the proxy threads sleep this way between pieces of work
// (docs/NET.md). Build and run (any Linux with gcc; CPUs 0 and 1 must exist):
//   gcc -O2 -pthread -o wake-latency scripts/wake-latency.c
//   ./wake-latency 0 0; ./wake-latency 1 0; ./wake-latency 1 1   # spinner? yielding?
// Prints the median, 99th percentile and longest of 400 wake-and-answer round trips, and
// how many took over 0.5 ms.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <stdatomic.h>
static int p1[2], p2[2];
static atomic_int stop;
static int yield_mode;
static void pin(int cpu){cpu_set_t s;CPU_ZERO(&s);CPU_SET(cpu,&s);pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
static void* spinner(void*a){pin(0);while(!atomic_load(&stop)){ if(yield_mode) sched_yield(); }return 0;}
static void* sleeper(void*a){pin(0);char c;for(;;){struct pollfd f={p1[0],POLLIN,0};poll(&f,1,-1);if(read(p1[0],&c,1)!=1||c=='q')break;write(p2[1],&c,1);}return 0;}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int spin=atoi(argv[1]); yield_mode=atoi(argv[2]);
  pipe(p1);pipe(p2);pthread_t a,b;
  if(spin) pthread_create(&a,0,spinner,0);
  pthread_create(&b,0,sleeper,0); pin(1); usleep(100000);
  enum{N=400}; double d[N];
  for(int i=0;i<N;i++){ usleep(500); double t=now(); write(p1[1],"x",1); char c; read(p2[0],&c,1); d[i]=now()-t; }
  write(p1[1],"q",1); atomic_store(&stop,1);
  qsort(d,N,sizeof d[0],cmp);
  int late=0; for(int i=0;i<N;i++) if(d[i]>500) late++; printf("spinner=%d yield=%d: wake round trip median %.1f us, p99 %.1f, max %.1f, over 0.5 ms: %d of %d\n",spin,yield_mode,d[N/2],d[N*99/100],d[N-1],late,N);
  return 0;}
