// kernel_trace.c: libg4ktrace.so, an LD_PRELOAD library that records every kernel a process runs
// with CUPTI's activity API and writes one CSV row per kernel (issue 30: where a graph-replayed
// decode step's time goes in situ, with PDL overlap, which Nsight Compute's serialized replay
// cannot show). Build: tools/gpu/build_kernel_trace.sh OUTDIR (not part of the CMake build).
//
//   G4_KTRACE_OUT=k.csv LD_PRELOAD=OUTDIR/libg4ktrace.so build-gpu/g4cu generate PKG ...
//   python3 tools/python/ktrace_step.py k.csv
//
// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, not _KIND_KERNEL: the latter serializes kernels, which
// would remove the very overlap we want to see. A graph's kernel nodes come as one record each,
// with graphId / graphNodeId set (0 for kernels not launched from a graph). Memcpy / memset
// rows too (G4_KTRACE_MEM=0: kernels only): the host staging between two decode steps.
// Rows are written as CUPTI hands buffers back (when full, every flush period, at exit);
// at exit the remaining records are flushed and the file is closed. The file is opened at the
// first record, so a process that never runs a kernel (a shell the preload leaked into) leaves
// no file behind. Every CUPTI call is checked; a failure prints one line naming the call.
#include <cupti.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The kernel record of this CUPTI (CUPTI_API_VERSION 130001: CUpti_ActivityKernel10). A newer
// library appends fields to the record, so the fields read here keep their offsets.
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 ktrace_kernel;
#else // (CUDA 12.x: the record with graphId and the cluster dims)
typedef CUpti_ActivityKernel9 ktrace_kernel;
#endif

#define BUF_BYTES (8u << 20) // an activity buffer (~35k kernel records)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out; // the CSV, opened at the first record
static char out_path[4096];
static int on, closed, failed; // tracing enabled; file closed at exit; a CUPTI call failed
static uint64_t n_kernel, n_copy, n_set, n_other, n_dropped, n_late;

static int ck(CUptiResult r, const char *call) {
    if (r == CUPTI_SUCCESS) return 0;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    fprintf(stderr, "g4ktrace: %s failed: %s (%d)\n", call, s, (int)r);
    failed = 1;
    return 1;
}
#define CK(call) ck((call), #call)

// Demangled kernel names, cached by CUPTI's name pointer (shared by every record of one kernel)
// and checked against the mangled text, so a reused pointer cannot alias. __cxa_demangle comes
// from the process's C++ runtime if it has one (the CUDA runtime does), else libstdc++ is
// opened; without either the mangled name is written.
typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
static demangle_fn demangle;
typedef struct {
    const char *ptr;
    char *mangled, *shown;
} name_entry;
static name_entry *names;
static size_t n_names, cap_names;

static const char *shown_name(const char *mangled) {
    if (!mangled) return "?";
    for (size_t i = 0; i < n_names; i++)
        if (names[i].ptr == mangled && !strcmp(names[i].mangled, mangled)) return names[i].shown;
    if (n_names == cap_names) {
        size_t c = cap_names ? 2 * cap_names : 256;
        name_entry *p = realloc(names, c * sizeof *p);
        if (!p) return mangled;
        names = p;
        cap_names = c;
    }
    char *d = NULL;
    int st = -1;
    if (demangle) d = demangle(mangled, NULL, NULL, &st);
    name_entry *e = &names[n_names];
    e->ptr = mangled;
    e->mangled = strdup(mangled);
    e->shown = (d && st == 0) ? d : strdup(mangled);
    if (d && st != 0) free(d);
    if (!e->mangled || !e->shown) return mangled;
    n_names++;
    return e->shown;
}

// A CSV field: quoted, inner quotes doubled (demangled names hold commas).
static void put_field(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static const char *HEADER =
    "kind,name,start_ns,end_ns,correlation_id,graph_id,graph_node_id,stream_id,device_id,"
    "grid_x,grid_y,grid_z,block_x,block_y,block_z,cluster_x,cluster_y,cluster_z,static_smem,"
    "dynamic_smem,registers,bytes,mangled\n";

static int open_out(void) {
    if (out) return 1;
    if (closed) return 0;
    out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "g4ktrace: cannot write %s\n", out_path);
        closed = 1;
        return 0;
    }
    fputs(HEADER, out);
    return 1;
}

static void put_kernel(const ktrace_kernel *k) {
    put_field(out, "kernel");
    fputc(',', out);
    put_field(out, shown_name(k->name));
    fprintf(out,
            ",%" PRIu64 ",%" PRIu64 ",%u,%u,%" PRIu64
            ",%u,%u,%d,%d,%d,%d,%d,%d,%u,%u,%u,%d,%d,%u,0,",
            k->start, k->end, k->correlationId, k->graphId, k->graphNodeId, k->streamId,
            k->deviceId, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->clusterX,
            k->clusterY, k->clusterZ, k->staticSharedMemory, k->dynamicSharedMemory,
            (unsigned)k->registersPerThread);
    put_field(out, k->name ? k->name : "?");
    fputc('\n', out);
}

static const char *copy_kind(uint8_t k) {
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
        return "[memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
        return "[memcpy HtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
        return "[memcpy PtoP]";
    default:
        return "[memcpy]";
    }
}

// The memcpy / memset rows: the same columns, launch shape 0, bytes set.
static void put_mem(const char *kind, const char *name, uint64_t start, uint64_t end, uint32_t corr,
                    uint32_t graph, uint64_t node, uint32_t stream, uint32_t dev, uint64_t bytes) {
    fprintf(out,
            "\"%s\",\"%s\",%" PRIu64 ",%" PRIu64 ",%u,%u,%" PRIu64
            ",%u,%u,0,0,0,0,0,0,0,0,0,0,0,0,%" PRIu64 ",\"\"\n",
            kind, name, start, end, corr, graph, node, stream, dev, bytes);
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
    if (!*buf)
        fprintf(stderr, "g4ktrace: out of memory for a %u-byte activity buffer\n", BUF_BYTES);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid) {
    (void)size; // (valid: the bytes holding records)
    pthread_mutex_lock(&mu);
    CUpti_Activity *r = NULL;
    int can = valid > 0 && open_out();
    for (;;) {
        CUptiResult st = cuptiActivityGetNextRecord(buf, valid, &r);
        if (st == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        if (ck(st, "cuptiActivityGetNextRecord")) break;
        if (!can) {
            n_late++;
            continue;
        }
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            put_kernel((const ktrace_kernel *)r);
            n_kernel++;
            break;
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            put_mem("memcpy", copy_kind(m->copyKind), m->start, m->end, m->correlationId,
                    m->graphId, m->graphNodeId, m->streamId, m->deviceId, m->bytes);
            n_copy++;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            put_mem("memset", "[memset]", m->start, m->end, m->correlationId, m->graphId,
                    m->graphNodeId, m->streamId, m->deviceId, m->bytes);
            n_set++;
            break;
        }
        default:
            n_other++;
            break;
        }
    }
    size_t dropped = 0;
    if (!CK(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped))) n_dropped += dropped;
    if (out) fflush(out);
    pthread_mutex_unlock(&mu);
    free(buf);
}

static void ktrace_exit(void) {
    if (!on) return;
    CK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    pthread_mutex_lock(&mu);
    if (out && fclose(out)) fprintf(stderr, "g4ktrace: error closing %s\n", out_path);
    int wrote = out != NULL;
    out = NULL;
    closed = 1;
    pthread_mutex_unlock(&mu);
    if (wrote)
        fprintf(stderr,
                "g4ktrace: %" PRIu64 " kernel, %" PRIu64 " memcpy, %" PRIu64
                " memset rows, %" PRIu64 " dropped, %" PRIu64 " after close -> %s\n",
                n_kernel, n_copy, n_set, n_dropped, n_late, out_path);
    else
        fprintf(stderr, "g4ktrace: no activity record came back (%s not written)\n", out_path);
}

// Before main and the engine's first CUDA call. Also CUDA's injection entry point
// (CUDA_INJECTION64_PATH=libg4ktrace.so), where the constructor has already run.
__attribute__((constructor)) static void ktrace_init(void) {
    if (on || failed) return;
    const char *p = getenv("G4_KTRACE_OUT");
    snprintf(out_path, sizeof out_path, "%s", p && *p ? p : "ktrace.csv");
    demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!demangle) {
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        if (h) demangle = (demangle_fn)dlsym(h, "__cxa_demangle");
    }
    if (CK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) ||
        CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)))
        return;
    const char *mem = getenv("G4_KTRACE_MEM");
    if (!(mem && !strcmp(mem, "0")) && (CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) ||
                                        CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET))))
        return;
    // buffers come back at least every 500 ms, not only when 8 MB are full
    if (CK(cuptiActivityFlushPeriod(500))) return;
    on = 1;
    if (atexit(ktrace_exit)) fprintf(stderr, "g4ktrace: atexit failed: no flush at exit\n");
    fprintf(stderr, "g4ktrace: tracing kernels (CUPTI %d) -> %s\n", CUPTI_API_VERSION, out_path);
}

int InitializeInjection(void) {
    ktrace_init();
    return on;
}
