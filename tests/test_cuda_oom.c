// test_cuda_oom.c: GPU out of memory is a user error that says how much was asked for, not a
// crash: a text state far larger than the GPU (a huge context) fails with G4_EUSER (g4cu exits
// 1) and one line "cuda backend out of memory: a context of N tokens, up to R per forward call,
// needs X GiB of KV cache and activations (ask for a shorter context or fewer tokens per
// call)"; what it had allocated is freed (a state of
// half the GPU's memory fits right after two failures), and the backend still runs a forward.
//
// Packages (made on the GPU machine by tools/gpu/run.sh; the test skips, saying why, without
// a GPU or without G4_GPU_TINY_PKG):
//   G4_GPU_TINY_PKG  gpu-tiny (context 256, vocab 512): its whole context with 2^26 rows per
//                    forward call; the logits alone are 2^26 x 512 x 4 bytes = 128 GiB, the
//                    state needs several times the H200's 141 GB
//   G4_GPU_E2B_PKG   optional, the full-size E2B package: its whole 131072-token context with
//                    131072 rows per call, the state `g4cu bench` would make for a 131072-token
//                    prefill; its logits alone are 131072 x 262144 x 4 bytes = 128 GiB, which
//                    with the ~10 GiB of weights and the rest of the state exceed the GPU
// The expected size is bounded below by those logits bytes, computed here from the config,
// not taken from the engine.
#include <math.h>
#include <stdlib.h>

#include "engine/text_model.h"
#include "kernels/backend_select.h"
#include "kernels/cuda_util.h"
#include "tests/test_util.h"

// The device's memory in GiB, from g4_cuda_describe ("..., L2 50 MB, 139.8 GiB, driver ...").
static double device_gib(void) {
    char buf[512];
    g4_cuda_describe(buf, sizeof buf);
    const char *e = strstr(buf, " GiB");
    if (!e) return 0;
    const char *s = e;
    while (s > buf && s[-1] != ' ') s--;
    return atof(s);
}

// "... needs 123.45 GiB ..." -> 123.45 (-1 when absent).
static double needs_gib(const char *msg) {
    const char *p = strstr(msg, "needs ");
    return p ? atof(p + 6) : -1;
}

static void test_package(const char *what, const char *dir, int capacity_or_0, int rows) {
    g4_backend *be;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    int rc;
    if ((rc = g4_backend_by_name("cuda", &be)) || (rc = g4_package_open(dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m))) {
        CHECK_MSG(0, "%s: %s", what, g4_error());
        if (p) g4_package_close(p);
        return;
    }
    const g4_text_config *c = m->cfg;
    const int cap = capacity_or_0 ? capacity_or_0 : c->context_length;
    const double logits_gib = (double)rows * c->vocab * 4 / (1u << 30);
    const double gpu_gib = device_gib();
    printf("%s: %s, context %d, %d rows per call (logits alone %.1f GiB), GPU %.1f GiB\n", what,
           dir, cap, rows, logits_gib, gpu_gib);
    CHECK_MSG(gpu_gib > 0, "%s: no device memory size in g4_cuda_describe", what);

    // Twice: a failure that leaked its partial allocations would make the second one, or the
    // half-GPU state below, fail differently.
    double need = -1;
    for (int k = 0; k < 2; k++) {
        g4_text_state *s = (g4_text_state *)1;
        rc = g4_text_state_new(m, cap, rows, &s);
        const char *e = g4_error();
        printf("  attempt %d: rc %d: %s\n", k + 1, rc, e);
        CHECK_MSG(rc == G4_EUSER, "%s: rc %d, expected a user error (exit 1)", what, rc);
        CHECK(s == NULL);
        char per_call[64];
        snprintf(per_call, sizeof per_call, "up to %d per forward call", rows);
        CHECK_MSG(strstr(e, "cuda backend out of memory") && strstr(e, "GiB") &&
                      strstr(e, per_call) && !strchr(e, '\n'),
                  "%s: message: %s", what, e);
        need = needs_gib(e);
        CHECK_MSG(need >= logits_gib, "%s: reports %.2f GiB, less than the logits' %.2f GiB", what,
                  need, logits_gib);
        if (rc == G4_OK) g4_text_state_free(s);
    }
    // Half the GPU, at the same bytes per row the failed request reported.
    if (need > 0 && gpu_gib > 0) {
        int half = (int)(0.5 * gpu_gib / (need / rows));
        if (half < 1) half = 1;
        g4_text_state *s = NULL;
        rc = g4_text_state_new(m, cap, half, &s);
        CHECK_MSG(rc == G4_OK, "%s: a state of %d rows (about half the GPU) after the failures: %s",
                  what, half, g4_error());
        if (s) g4_text_state_free(s);
        printf("  a state of %d rows per call (about %.1f GiB) fits afterwards\n", half,
               need / rows * half);
    }
    // The backend still works: a short forward gives finite logits.
    g4_text_state *s = NULL;
    rc = g4_text_state_new(m, 16, 8, &s);
    CHECK_MSG(rc == G4_OK, "%s: %s", what, g4_error());
    if (!rc) {
        int32_t ids[8] = {2, 5, 17, 3, 9, 11, 4, 6};
        float *logits = g4_malloc(sizeof(float) * (size_t)c->vocab);
        rc = g4_text_forward(s, ids, 8, NULL, logits, 0);
        CHECK_MSG(rc == G4_OK, "%s: forward after the failures: %s", what, g4_error());
        int finite = 1;
        for (int i = 0; i < c->vocab && !rc; i++) finite &= isfinite(logits[i]) != 0;
        CHECK_MSG(!rc && finite, "%s: logits after the failures are not finite", what);
        free(logits);
        g4_text_state_free(s);
    }
    g4_text_model_free(m);
    g4_package_close(p);
}

int main(void) {
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) return g4t_skip("test_cuda_oom", why);
    const char *tiny = getenv("G4_GPU_TINY_PKG"), *e2b = getenv("G4_GPU_E2B_PKG");
    if (!tiny || !*tiny)
        return g4t_skip("test_cuda_oom",
                        "G4_GPU_TINY_PKG is not set (tools/gpu/run.sh makes the gpu-tiny package "
                        "with tools/python/make_package.py --preset gpu-tiny)");
    test_package("gpu-tiny", tiny, 0, 1 << 26);
    if (e2b && *e2b) test_package("e2b", e2b, 0, 131072);
    else printf("e2b: G4_GPU_E2B_PKG is not set; only the gpu-tiny case ran\n");
    return g4t_finish("test_cuda_oom");
}
