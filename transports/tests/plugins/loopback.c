/* A net plugin for oxccl's tests: an in-process "network" (every comm lives in this process:
 * ranks as threads) implementing NCCL's net plugin ABI v6, v7 or v8, the versions with int
 * sizes. Written for oxccl from the ABI's published struct layouts; no NCCL code.
 *
 * Build: cc -shared -fPIC -DNET_VERSION=8 [switches] loopback.c -lpthread
 *   NET_VERSION=6|7|8   the ABI version exported (default 8)
 *   MAX_RECVS=n         buffers per irecv (default 4)
 *   SYMBOL=name         export the vtable under another name (a version oxccl does not read)
 *   NO_VTABLE           export no vtable at all
 *   NULL_ISEND          leave isend NULL in the vtable
 *   FAIL_INIT           init returns ncclSystemError
 *   FAIL_ISEND_AFTER=n  isend returns ncclSystemError after n sends (in the whole process)
 *   NEVER_COMPLETE      test never reports a request done
 *   BAD_SPEED           getProperties reports a speed of -1
 *   OVERREPORT          test reports 1000 bytes more than each receive got
 *
 * Semantics are the ABI's: a send completes once a receive took it; an irecv of n buffers
 * completes when n messages arrived, each put in the free buffer with its tag; messages
 * arrive in the order they were sent on the connection. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef NET_VERSION
#define NET_VERSION 8
#endif
#if defined(NO_VTABLE) || defined(NULL_ISEND)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#ifndef MAX_RECVS
#define MAX_RECVS 4
#endif

typedef int status_t; /* ncclResult_t */
#define SUCCESS 0
#define SYSTEM_ERROR 2
#define INTERNAL_ERROR 3
#define LOG_INFO 3
#define LOG_WARN 2
#define SUBSYS_NET 0x10
#define PTR_HOST 1
#define HANDLE_MAGIC 0x6f78636c6c6f6f70ull /* "oxclloop" */

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* format, ...);
static logger_t logger;

typedef struct {
  char* name; char* pci_path; uint64_t guid; int ptr_support;
#if NET_VERSION >= 8
  int reg_is_global;
#endif
  int speed; int port; float latency; int max_comms; int max_recvs;
#if NET_VERSION >= 7
  int device_type; int device_version;
#endif
} properties_t;

/* One connection: sends and receives posted and not yet matched, in order. */
struct request;
typedef struct {
  pthread_mutex_t lock;
  struct request* sends_head; struct request* sends_tail;
  struct request* recvs_head; struct request* recvs_tail;
  int failed;
  int closed_sides;
} conn_t;

typedef struct request {
  int is_send;
  conn_t* conn;
  struct request* next;
  int done;
  /* a send */
  void* data; int size; int tag;
  /* a receive */
  int n; void* buffers[MAX_RECVS]; int capacities[MAX_RECVS]; int tags[MAX_RECVS]; int sizes[MAX_RECVS]; int filled[MAX_RECVS]; int count;
} request_t;

typedef struct {
  pthread_mutex_t lock;
  conn_t* pending[64];
  int npending;
} listen_t;

typedef struct { uint64_t magic; listen_t* listen; } handle_t;

static void enqueue(request_t** head, request_t** tail, request_t* r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r; else *head = r;
  *tail = r;
}

static request_t* dequeue(request_t** head, request_t** tail) {
  request_t* r = *head;
  *head = r->next;
  if (!*head) *tail = NULL;
  return r;
}

/* Matches posted sends to posted receives; the caller holds the lock. */
static void progress(conn_t* c) {
  while (!c->failed && c->sends_head && c->recvs_head) {
    request_t* s = c->sends_head;
    request_t* r = c->recvs_head;
    int slot = -1;
    for (int i = 0; i < r->n; i++)
      if (!r->filled[i] && r->tags[i] == s->tag) { slot = i; break; }
    if (slot < 0 || s->size > r->capacities[slot]) {
      if (logger) logger(LOG_WARN, SUBSYS_NET, __FILE__, __LINE__, "loopback: message of %d bytes with tag %d fits no buffer", s->size, s->tag);
      c->failed = 1;
      return;
    }
    if (s->size > 0) memcpy(r->buffers[slot], s->data, (size_t)s->size);
    r->filled[slot] = 1;
    r->sizes[slot] = s->size;
    s->done = 1;
    dequeue(&c->sends_head, &c->sends_tail);
    if (++r->count == r->n) {
      r->done = 1;
      dequeue(&c->recvs_head, &c->recvs_tail);
    }
  }
}

static status_t plugin_init(logger_t log) {
  logger = log;
  if (logger) logger(LOG_INFO, SUBSYS_NET, __FILE__, __LINE__, "loopback plugin v%d ready: %d receives per irecv", NET_VERSION, MAX_RECVS);
#ifdef FAIL_INIT
  return SYSTEM_ERROR;
#else
  return SUCCESS;
#endif
}

static status_t plugin_devices(int* count) { *count = 1; return SUCCESS; }

static status_t plugin_properties(int device, properties_t* p) {
  if (device != 0) return INTERNAL_ERROR;
  memset(p, 0, sizeof *p);
  p->name = "loop0";
  p->pci_path = NULL;
  p->guid = 0x100;
  p->ptr_support = PTR_HOST;
#ifdef BAD_SPEED
  p->speed = -1;
#else
  p->speed = 100000;
#endif
  p->latency = 1.5f;
  p->max_comms = 4096;
  p->max_recvs = MAX_RECVS;
  return SUCCESS;
}

static status_t plugin_listen(int device, void* handle, void** listen_comm) {
  (void)device;
  listen_t* l = calloc(1, sizeof *l);
  pthread_mutex_init(&l->lock, NULL);
  handle_t h = {HANDLE_MAGIC, l};
  memcpy(handle, &h, sizeof h);
  *listen_comm = l;
  return SUCCESS;
}

static status_t connect_common(void* handle, void** send_comm) {
  handle_t h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != HANDLE_MAGIC) return INTERNAL_ERROR;
  conn_t* c = calloc(1, sizeof *c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_lock(&h.listen->lock);
  if (h.listen->npending == 64) { pthread_mutex_unlock(&h.listen->lock); free(c); return INTERNAL_ERROR; }
  h.listen->pending[h.listen->npending++] = c;
  pthread_mutex_unlock(&h.listen->lock);
  *send_comm = c;
  return SUCCESS;
}

static status_t accept_common(void* listen_comm, void** recv_comm) {
  listen_t* l = listen_comm;
  pthread_mutex_lock(&l->lock);
  *recv_comm = NULL;
  if (l->npending > 0) {
    *recv_comm = l->pending[0];
    memmove(l->pending, l->pending + 1, sizeof(conn_t*) * (size_t)(--l->npending));
  }
  pthread_mutex_unlock(&l->lock);
  return SUCCESS;
}

#if NET_VERSION >= 7
static status_t plugin_connect(int device, void* handle, void** send_comm, void** device_comm) { (void)device; (void)device_comm; return connect_common(handle, send_comm); }
static status_t plugin_accept(void* listen_comm, void** recv_comm, void** device_comm) { (void)device_comm; return accept_common(listen_comm, recv_comm); }
#else
static status_t plugin_connect(int device, void* handle, void** send_comm) { (void)device; return connect_common(handle, send_comm); }
static status_t plugin_accept(void* listen_comm, void** recv_comm) { return accept_common(listen_comm, recv_comm); }
#endif

static int registrations;
#if NET_VERSION >= 8
static status_t plugin_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
#else
static status_t plugin_reg_mr(void* comm, void* data, int size, int type, void** mhandle) {
#endif
  (void)comm; (void)data; (void)size;
  if (type != PTR_HOST) return INTERNAL_ERROR;
  __atomic_add_fetch(&registrations, 1, __ATOMIC_RELAXED);
  *mhandle = &registrations;
  return SUCCESS;
}

static status_t plugin_reg_mr_dma_buf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  (void)comm; (void)data; (void)size; (void)type; (void)offset; (void)fd; (void)mhandle;
  return INTERNAL_ERROR;
}

static status_t plugin_dereg_mr(void* comm, void* mhandle) {
  (void)comm;
  if (mhandle != &registrations) return INTERNAL_ERROR;
  __atomic_sub_fetch(&registrations, 1, __ATOMIC_RELAXED);
  return SUCCESS;
}

static int sends;
static status_t plugin_isend(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)mhandle;
#ifdef FAIL_ISEND_AFTER
  if (__atomic_fetch_add(&sends, 1, __ATOMIC_RELAXED) >= FAIL_ISEND_AFTER) return SYSTEM_ERROR;
#else
  (void)sends;
#endif
  conn_t* c = send_comm;
  request_t* r = calloc(1, sizeof *r);
  r->is_send = 1; r->conn = c; r->data = data; r->size = size; r->tag = tag;
  pthread_mutex_lock(&c->lock);
  enqueue(&c->sends_head, &c->sends_tail, r);
  progress(c);
  pthread_mutex_unlock(&c->lock);
  *request = r;
  return SUCCESS;
}

static status_t plugin_irecv(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  (void)mhandles;
  if (n < 1 || n > MAX_RECVS) return INTERNAL_ERROR;
  conn_t* c = recv_comm;
  request_t* r = calloc(1, sizeof *r);
  r->conn = c; r->n = n;
  for (int i = 0; i < n; i++) { r->buffers[i] = data[i]; r->capacities[i] = sizes[i]; r->tags[i] = tags[i]; }
  pthread_mutex_lock(&c->lock);
  enqueue(&c->recvs_head, &c->recvs_tail, r);
  progress(c);
  pthread_mutex_unlock(&c->lock);
  *request = r;
  return SUCCESS;
}

static status_t plugin_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recv_comm; (void)n; (void)data; (void)sizes; (void)mhandles;
  *request = NULL;
  return SUCCESS;
}

static status_t plugin_test(void* request, int* done, int* sizes) {
  request_t* r = request;
  conn_t* c = r->conn;
  pthread_mutex_lock(&c->lock);
  progress(c);
  int failed = c->failed, finished = r->done;
  pthread_mutex_unlock(&c->lock);
  if (failed && !finished) return INTERNAL_ERROR;
#ifdef NEVER_COMPLETE
  finished = 0;
#endif
  *done = finished;
  if (!finished) return SUCCESS;
  if (sizes) {
    if (r->is_send) sizes[0] = r->size;
    else for (int i = 0; i < r->n; i++) sizes[i] = r->sizes[i];
#ifdef OVERREPORT
    if (!r->is_send) for (int i = 0; i < r->n; i++) sizes[i] += 1000;
#endif
  }
  free(r);
  return SUCCESS;
}

static status_t close_conn(void* comm) {
  conn_t* c = comm;
  pthread_mutex_lock(&c->lock);
  int last = ++c->closed_sides == 2;
  pthread_mutex_unlock(&c->lock);
  if (last) free(c);
  return SUCCESS;
}

static status_t plugin_close_listen(void* listen_comm) { free(listen_comm); return SUCCESS; }

#if NET_VERSION >= 7
static status_t plugin_get_device_mr(void* comm, void* mhandle, void** device_mr) { (void)comm; (void)mhandle; (void)device_mr; return INTERNAL_ERROR; }
static status_t plugin_irecv_consumed(void* recv_comm, int n, void* request) { (void)recv_comm; (void)n; (void)request; return SUCCESS; }
#endif

typedef struct {
  const char* name;
  status_t (*init)(logger_t);
  status_t (*devices)(int*);
  status_t (*get_properties)(int, properties_t*);
  status_t (*listen)(int, void*, void**);
#if NET_VERSION >= 7
  status_t (*connect)(int, void*, void**, void**);
  status_t (*accept)(void*, void**, void**);
#else
  status_t (*connect)(int, void*, void**);
  status_t (*accept)(void*, void**);
#endif
#if NET_VERSION >= 8
  status_t (*reg_mr)(void*, void*, size_t, int, void**);
#else
  status_t (*reg_mr)(void*, void*, int, int, void**);
#endif
  status_t (*reg_mr_dma_buf)(void*, void*, size_t, int, uint64_t, int, void**);
  status_t (*dereg_mr)(void*, void*);
  status_t (*isend)(void*, void*, int, int, void*, void**);
  status_t (*irecv)(void*, int, void**, int*, int*, void**, void**);
  status_t (*iflush)(void*, int, void**, int*, void**, void**);
  status_t (*test)(void*, int*, int*);
  status_t (*close_send)(void*);
  status_t (*close_recv)(void*);
  status_t (*close_listen)(void*);
#if NET_VERSION >= 7
  status_t (*get_device_mr)(void*, void*, void**);
  status_t (*irecv_consumed)(void*, int, void*);
#endif
} net_t;

#define PASTE(a, b) a##b
#define VERSIONED(v) PASTE(ncclNetPlugin_v, v)
#ifndef SYMBOL
#define SYMBOL VERSIONED(NET_VERSION)
#endif

#ifndef NO_VTABLE
__attribute__((visibility("default"))) const net_t SYMBOL = {
  .name = "loopback",
  .init = plugin_init,
  .devices = plugin_devices,
  .get_properties = plugin_properties,
  .listen = plugin_listen,
  .connect = plugin_connect,
  .accept = plugin_accept,
  .reg_mr = plugin_reg_mr,
  .reg_mr_dma_buf = plugin_reg_mr_dma_buf,
  .dereg_mr = plugin_dereg_mr,
#ifdef NULL_ISEND
  .isend = NULL,
#else
  .isend = plugin_isend,
#endif
  .irecv = plugin_irecv,
  .iflush = plugin_iflush,
  .test = plugin_test,
  .close_send = close_conn,
  .close_recv = close_conn,
  .close_listen = plugin_close_listen,
#if NET_VERSION >= 7
  .get_device_mr = plugin_get_device_mr,
  .irecv_consumed = plugin_irecv_consumed,
#endif
};
#endif
