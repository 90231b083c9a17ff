// baselines.c: loads cuBLAS / cuDNN on first use (see baselines.h). Plain C: the prototype
// checks below need __typeof__ on the header's one C declaration (C++ adds overloads).
#include "kernels/bench/baselines.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G4_STR_(x) #x
#define G4_STR(x)  G4_STR_(x)

// Every entry has its header's prototype: a header that changes one fails the build here,
// instead of a call through a pointer of the wrong type at run time.
#define G4_CHECK_PROTO(ret, name, params)                                                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params),                 \
                   #name ": the prototype in baselines.h differs from the library's header");
G4_CUBLAS_FNS(G4_CHECK_PROTO)
G4_CUDNN_FNS(G4_CHECK_PROTO)
#undef G4_CHECK_PROTO
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym's void * holds a function");

// Configure-time directories (CMake's find results) for the fallback; empty when not given.
#ifndef G4_CUBLAS_DIR
#define G4_CUBLAS_DIR ""
#endif
#ifndef G4_CUDNN_DIR
#define G4_CUDNN_DIR ""
#endif

typedef struct {
    pthread_once_t once;
    int ok;
    char why[1024];  // "not loaded: ..." when !ok
    char from[4096]; // the name the library was opened by, when ok
} lib_state;

// Opens the library: $env when set, else the soname through the loader's search, else the
// soname in the configure-time directory. Never closed: the process keeps it until exit.
static void *open_lib(lib_state *st, const char *env, const char *soname, const char *dir) {
    const char *name = getenv(env);
    if (name && name[0]) {
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (h)
            snprintf(st->from, sizeof st->from, "%s", name);
        else
            snprintf(st->why, sizeof st->why, "not loaded: %s (from %s)", dlerror(), env);
        return h;
    }
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h) {
        snprintf(st->from, sizeof st->from, "%s", soname);
        return h;
    }
    char first[512];
    snprintf(first, sizeof first, "%s", dlerror());
    if (dir[0]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, soname);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(st->from, sizeof st->from, "%s", path);
            return h;
        }
        snprintf(st->why, sizeof st->why, "not loaded: %s; %s", first, dlerror());
    } else {
        snprintf(st->why, sizeof st->why, "not loaded: %s", first);
    }
    return NULL;
}

// Resolves one function into *dst (a function pointer of sizeof(void *) bytes).
static int resolve(lib_state *st, void *h, const char *name, void *dst) {
    dlerror(); // clear a stale message
    void *p = dlsym(h, name);
    if (!p) {
        const char *e = dlerror();
        snprintf(st->why, sizeof st->why, "not loaded: %s", e ? e : name);
        st->from[0] = '\0';
        return 0;
    }
    memcpy(dst, &p, sizeof p);
    return 1;
}

static g4_cublas_api cublas_api;
static lib_state cublas_st = {PTHREAD_ONCE_INIT, 0, "", ""};

static void load_cublas(void) {
    lib_state *st = &cublas_st;
    void *h =
        open_lib(st, "G4_CUBLAS_LIB", "libcublas.so." G4_STR(CUBLAS_VER_MAJOR), G4_CUBLAS_DIR);
    if (!h) return;
#define G4_RESOLVE(ret, name, params)                                                              \
    if (!resolve(st, h, #name, &cublas_api.name)) return;
    G4_CUBLAS_FNS(G4_RESOLVE)
#undef G4_RESOLVE
    st->ok = 1;
}

static g4_cudnn_api cudnn_api;
static lib_state cudnn_st = {PTHREAD_ONCE_INIT, 0, "", ""};

static void load_cudnn(void) {
    lib_state *st = &cudnn_st;
    void *h = open_lib(st, "G4_CUDNN_LIB", "libcudnn.so." G4_STR(CUDNN_MAJOR), G4_CUDNN_DIR);
    if (!h) return;
#define G4_RESOLVE(ret, name, params)                                                              \
    if (!resolve(st, h, #name, &cudnn_api.name)) return;
    G4_CUDNN_FNS(G4_RESOLVE)
#undef G4_RESOLVE
    st->ok = 1;
}

static void report(const lib_state *st, const char **why, const char **from) {
    if (why) *why = st->ok ? "" : st->why;
    if (from) *from = st->ok ? st->from : "";
}

const g4_cublas_api *g4_cublas(const char **why, const char **from) {
    pthread_once(&cublas_st.once, load_cublas);
    report(&cublas_st, why, from);
    return cublas_st.ok ? &cublas_api : NULL;
}

const g4_cudnn_api *g4_cudnn(const char **why, const char **from) {
    pthread_once(&cudnn_st.once, load_cudnn);
    report(&cudnn_st, why, from);
    return cudnn_st.ok ? &cudnn_api : NULL;
}
