// Two processes, each bound to a core of its own (0 and 1), exchange messages over one
// loopback TCP connection, both directions at once, non-blocking, yielding when nothing
// moved; each prints its rate each way.
//   splice-send-bench <mode> <message bytes> <messages> <ring MiB> [kind]
// mode 0: send(); mode 1: vmsplice of the message's pages into a pipe, then splice to the
// socket (the kernel does not copy them; the receiver's recv copies from the sender's
// pages). Messages cycle through a ring of buffers (so that they are not all in the
// caches); nothing protects a buffer in flight from reuse, which the ring makes unlikely:
// a throughput measurement, not a transport. kind 0: malloc'd buffers; kind 1:
// cudaHostAlloc'd (build with -DWITH_CUDA and CUDA's include and library paths).
// The last received byte is checked against the sender's fill value.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef WITH_CUDA
#include <cuda_runtime.h>
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); size_t size=atol(argv[2]); int count=atoi(argv[3]); size_t ring=atol(argv[4])<<20;
  int l=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a; memset(&a,0,sizeof a); a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(INADDR_LOOPBACK);
  socklen_t al=sizeof a; bind(l,(void*)&a,sizeof a); listen(l,1); getsockname(l,(void*)&a,&al);
  pid_t child=fork(); int me=child==0; int fd;
  if(me){fd=socket(AF_INET,SOCK_STREAM,0); connect(fd,(void*)&a,sizeof a);} else {fd=accept(l,0,0);}
  int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,sizeof one);
  pin(me); fcntl(fd,F_SETFL,O_NONBLOCK);
  char*src; char*dst; int kind=argc>5?atoi(argv[5]):0;
  if(kind==0){src=(char*)aligned_alloc(4096,ring); dst=(char*)aligned_alloc(4096,ring);}
#ifdef WITH_CUDA
  else { if(cudaHostAlloc((void**)&src,ring,cudaHostAllocMapped)||cudaHostAlloc((void**)&dst,ring,cudaHostAllocMapped)){printf("cudaHostAlloc failed\n");return 1;} }
#else
  else { printf("kind %d needs a build with -DWITH_CUDA\n",kind); return 1; }
#endif
  if(!src||!dst){printf("no memory for two rings of %zu bytes\n",ring);return 1;}
  memset(src,me+1,ring); memset(dst,0,ring);
  int p[2]; pipe(p); fcntl(p[0],F_SETPIPE_SZ,1<<20); fcntl(p[1],F_SETFL,O_NONBLOCK); fcntl(p[0],F_SETFL,O_NONBLOCK);
  size_t slots=ring/size; long sent=0,recvd=0; size_t inpipe=0, vmoff=0;
  long total=(long)size*count; double t0=now(); long yields=0, calls=0;
  while(sent<total||recvd<total){
    int moved=0;
    if(sent<total){
      char*base=src+((sent/size)%slots)*size; size_t off=sent%size;
      if(mode==0){ ssize_t r=send(fd,base+off,size-off,MSG_NOSIGNAL|MSG_DONTWAIT); calls++; if(r>0){sent+=r;moved=1;} }
      else {
        // keep the pipe fed with the current message's pages, then splice to the socket
        if(inpipe==0 && vmoff<size){ struct iovec v={base+vmoff,size-vmoff}; ssize_t r=vmsplice(p[1],&v,1,SPLICE_F_NONBLOCK); calls++; if(r>0){inpipe+=r;vmoff+=r;} else if(r<0&&errno!=EAGAIN){perror("vmsplice");exit(1);} }
        if(inpipe>0){ ssize_t r=splice(p[0],0,fd,0,inpipe,SPLICE_F_NONBLOCK|SPLICE_F_MOVE); calls++; if(r>0){inpipe-=r;sent+=r;moved=1; if(inpipe==0&&vmoff==size) vmoff=0;} }
      }
    }
    if(recvd<total){
      char*base=dst+((recvd/size)%slots)*size; size_t off=recvd%size;
      ssize_t r=recv(fd,base+off,size-off,MSG_DONTWAIT); calls++; if(r>0){recvd+=r;moved=1;}
    }
    if(!moved){sched_yield();yields++;}
  }
  double t=now()-t0;
  // check a byte of the last message
  if(dst[(recvd-1)%ring]!=(char)(2-me)) printf("BAD DATA\n");
  printf("%s kind %d mode %d size %zu: %.2f GB/s each way, %.1f calls/msg, %ld yields\n", me?"child":"parent", kind, mode, size, total/t/1e9, (double)calls/count, yields);
  if(!me) wait(0);
  return 0;
}
