/* A tuner plugin for NCCL and oxccl, written for oxccl's tests: rules per collective, size
 * range and rank count, read from the file NCCL_TUNER_CONFIG_FILE names (the variable
 * NCCL's example tuner reads), one rule a line:
 *
 *   collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks
 *     collective: broadcast, reduce, allgather, reducescatter, allreduce
 *     algorithm:  tree, ring, collnetdirect, collnetchain, nvls, nvlstree, pat
 *     protocol:   ll, ll128, simple
 *     channels:   -1 keeps the tuner's; nranks: -1 matches any
 *   constant,base_latency,<algorithm>,<protocol>,<microseconds>    (ABI v5 and v6: set in init)
 *
 * The first matching rule sets its entry's cost to 0.0 (when the entry may run) and the
 * channel count. Build with -DTUNER_ABI=2..6 for the exported ncclTunerPlugin_vN;
 * -DFAIL_INIT or -DFAIL_COLL make init or getCollInfo fail. With TUNER_TEST_LOG set, each
 * call appends a line to that file (the tests check finalize ran).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef TUNER_ABI
#define TUNER_ABI 5
#endif

typedef int result_t; /* ncclResult_t: 0 success, 3 internal error */
typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
typedef struct { int count, minRanks, maxRanks; } nvl_domains_t;
typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
} constants_t;

#define MAX_RULES 64
struct rule { int func; size_t minBytes, maxBytes; int algo, proto, channels, nranks; };
struct context { struct rule rules[MAX_RULES]; int nrules; size_t nranks; logger_t log; };

static const char* funcs[] = { "broadcast", "reduce", "allgather", "reducescatter", "allreduce" };
static const char* algos[] = { "tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat" };
static const char* protos[] = { "ll", "ll128", "simple" };

static int lookup(const char* name, const char** names, int n) {
  for (int i = 0; i < n; i++) if (strcasecmp(name, names[i]) == 0) return i;
  return -1;
}

static void note(const char* what) {
  const char* path = getenv("TUNER_TEST_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (f) { fprintf(f, "%s\n", what); fclose(f); }
}

/* Reads the rules; applies constant lines to `constants` when given. */
__attribute__((unused)) static int readRules(struct context* ctx, constants_t* constants) {
  const char* path = getenv("NCCL_TUNER_CONFIG_FILE");
  if (!path) return 0;
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char a[32], b[32], c[32], d[32];
    double value;
    if (sscanf(line, "constant,%31[^,],%31[^,],%31[^,],%lf", a, b, c, &value) == 4) {
      int algo = lookup(b, algos, 7), proto = lookup(c, protos, 3);
      if (strcmp(a, "base_latency") != 0 || algo < 0 || proto < 0) { fclose(f); return -1; }
      if (constants) constants->baseLatencies[algo][proto] = value;
      continue;
    }
    unsigned long long lo, hi;
    int channels, nranks;
    if (sscanf(line, "%31[^,],%llu,%llu,%31[^,],%31[^,],%d,%d", a, &lo, &hi, b, c, &channels, &nranks) != 7) { fclose(f); return -1; }
    struct rule r = { lookup(a, funcs, 5), lo, hi, lookup(b, algos, 7), lookup(c, protos, 3), channels, nranks };
    if (r.func < 0 || r.algo < 0 || r.proto < 0 || ctx->nrules == MAX_RULES) { fclose(f); return -1; }
    (void)d;
    ctx->rules[ctx->nrules++] = r;
  }
  fclose(f);
  return 0;
}

__attribute__((unused)) static const struct rule* match(struct context* ctx, int func, size_t bytes) {
  for (int i = 0; i < ctx->nrules; i++) {
    const struct rule* r = &ctx->rules[i];
    if (r->func == func && bytes >= r->minBytes && bytes <= r->maxBytes && (r->nranks == -1 || (size_t)r->nranks == ctx->nranks)) return r;
  }
  return NULL;
}

static result_t start(void** context, size_t nRanks, logger_t log, constants_t* constants) {
#ifdef FAIL_INIT
  (void)context; (void)nRanks; (void)log; (void)constants;
  return 3;
#else
  struct context* ctx = calloc(1, sizeof *ctx);
  if (!ctx) return 3;
  ctx->nranks = nRanks;
  ctx->log = log;
  if (readRules(ctx, constants) != 0) { free(ctx); return 3; }
  if (log) log(3, 0x40, __FILE__, __LINE__, "rules tuner: rules loaded");
  note("init");
  *context = ctx;
  return 0;
#endif
}

__attribute__((unused)) static result_t tableInfo(void* context, int func, size_t bytes, float** costTable, int* nChannels) {
#ifdef FAIL_COLL
  (void)context; (void)func; (void)bytes; (void)costTable; (void)nChannels;
  return 3;
#else
  float (*table)[3] = (float (*)[3])costTable;
  const struct rule* r = match(context, func, bytes);
  if (!r) return 0;
  if (table[r->algo][r->proto] != -1.0f) table[r->algo][r->proto] = 0.0f;
  if (r->channels != -1) *nChannels = r->channels;
  return 0;
#endif
}

static result_t stop(void* context) {
  note("finalize");
  free(context);
  return 0;
}

#if TUNER_ABI >= 5
static result_t initV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, logger_t log, nvl_domains_t* domains, constants_t* constants) {
  (void)commId; (void)nNodes; (void)domains;
  return start(context, nRanks, log, constants);
}
static result_t collInfoV5(void* context, int func, size_t bytes, int pipeOps, float** table, int nAlgo, int nProto, int regBuff, int* nChannels) {
  (void)pipeOps; (void)nAlgo; (void)nProto; (void)regBuff;
  return tableInfo(context, func, bytes, table, nChannels);
}
#else
static result_t initOld(size_t nRanks, size_t nNodes, logger_t log, void** context) {
  (void)nNodes;
  return start(context, nRanks, log, NULL);
}
#endif

#if TUNER_ABI == 6
struct { const char* name; void* init; void* getCollInfo; void* finalize; void* getChunkSize; } ncclTunerPlugin_v6 = { "rules", initV5, collInfoV5, stop, NULL };
#elif TUNER_ABI == 5
struct { const char* name; void* init; void* getCollInfo; void* finalize; } ncclTunerPlugin_v5 = { "rules", initV5, collInfoV5, stop };
#elif TUNER_ABI == 4
static result_t collInfoV4(void* context, int func, size_t bytes, int pipeOps, float** table, int nAlgo, int nProto, int regBuff, int* nChannels) {
  (void)pipeOps; (void)nAlgo; (void)nProto; (void)regBuff;
  return tableInfo(context, func, bytes, table, nChannels);
}
struct { const char* name; void* init; void* getCollInfo; void* destroy; } ncclTunerPlugin_v4 = { "rules", initOld, collInfoV4, stop };
#elif TUNER_ABI == 3
static result_t collInfoV3(void* context, int func, size_t bytes, int pipeOps, float** table, int nAlgo, int nProto, int* nChannels) {
  (void)pipeOps; (void)nAlgo; (void)nProto;
  return tableInfo(context, func, bytes, table, nChannels);
}
struct { const char* name; void* init; void* getCollInfo; void* destroy; } ncclTunerPlugin_v3 = { "rules", initOld, collInfoV3, stop };
#elif TUNER_ABI == 2
static result_t collInfoV2(void* context, int func, size_t bytes, int collNet, int nvls, int pipeOps, int* algorithm, int* protocol, int* nChannels) {
  (void)collNet; (void)nvls; (void)pipeOps;
#ifdef FAIL_COLL
  (void)context; (void)func; (void)bytes; (void)algorithm; (void)protocol; (void)nChannels;
  return 3;
#else
  const struct rule* r = match(context, func, bytes);
  if (!r) return 0;
  *algorithm = r->algo;
  *protocol = r->proto;
  if (r->channels != -1) *nChannels = r->channels;
  return 0;
#endif
}
struct { const char* name; void* init; void* getCollInfo; void* destroy; } ncclTunerPlugin_v2 = { "rules", initOld, collInfoV2, stop };
#endif
