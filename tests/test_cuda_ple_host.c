// test_cuda_ple_host.c: the per-layer embedding table read in place from pinned host memory
// (`--ple-host`, be->ple_host) gives bit-identical results to the table on the device: the same
// kernels read the same bytes, only over PCIe. Checks the placement accounting too (the table's
// bytes leave weight_bytes and appear in host_bytes) and that a graph-replayed greedy decode
// takes the same tokens, so the captured step reads the host table as well.
//
// Package: G4_GPU_TINY_PKG (gpu-tiny, made on the GPU machine by tools/gpu/run.sh); skips,
// saying why, without a GPU or without it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text_model.h"
#include "kernels/backend_select.h"
#include "kernels/cuda_util.h"
#include "tests/test_util.h"

enum { T = 40, STEPS = 24 };

// Prefill logits of T ids (all rows) and STEPS greedy tokens after them.
static int run(g4_text_model *m, const int32_t *ids, float *logits, int32_t *toks) {
    g4_text_state *s;
    int rc = g4_text_state_new(m, T + STEPS + 1, T, &s);
    if (rc) return rc;
    if (!(rc = g4_text_forward(s, ids, T - 1, NULL, logits, 1))) {
        int32_t tok = ids[T - 1];
        for (int i = 0; i < STEPS && !rc; i++) rc = g4_text_decode_greedy(s, tok, &tok), toks[i] = tok;
    }
    g4_text_state_free(s);
    return rc;
}

int main(void) {
    const char *why = NULL;
    if (g4_cuda_device_count(&why) == 0) return g4t_skip("test_cuda_ple_host", why);
    const char *dir = getenv("G4_GPU_TINY_PKG");
    if (!dir || !*dir)
        return g4t_skip("test_cuda_ple_host",
                        "G4_GPU_TINY_PKG is not set (tools/gpu/run.sh makes the gpu-tiny package)");
    g4_package *p;
    g4_backend *be;
    CHECK_MSG(g4_package_open(dir, &p) == 0, "%s", g4_error());
    CHECK(g4_backend_by_name("cuda", &be) == 0);
    CHECK(be->alloc_mapped != NULL);
    g4_text_model *dev = NULL, *host = NULL;
    be->ple_host = 0;
    CHECK_MSG(g4_text_model_load(p, be, &dev) == 0, "%s", g4_error());
    be->ple_host = 1;
    CHECK_MSG(g4_text_model_load(p, be, &host) == 0, "%s", g4_error());
    be->ple_host = 0;
    if (dev && host) {
        const uint64_t ple = (uint64_t)p->text.vocab_ple * p->text.n_layers * p->text.ple_dim * 2;
        CHECK(dev->ple_mapped == NULL && dev->host_bytes == 0);
        CHECK(host->ple_mapped != NULL && host->embed_ple == host->ple_mapped);
        CHECK_MSG(host->host_bytes == ple && dev->weight_bytes - host->weight_bytes == ple,
                  "host %llu (table %llu), device weights %llu vs %llu",
                  (unsigned long long)host->host_bytes, (unsigned long long)ple,
                  (unsigned long long)dev->weight_bytes, (unsigned long long)host->weight_bytes);
        const size_t n = (size_t)(T - 1) * p->text.vocab;
        float *ld = malloc(n * sizeof(float)), *lh = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) ld[i] = lh[i] = NAN; // poisoned
        int32_t ids[T], td[STEPS] = {0}, th[STEPS] = {0};
        unsigned long long seed = 11;
        for (int t = 0; t < T; t++)
            ids[t] = (int32_t)(g4t_rand_u64(&seed) % (unsigned)p->text.vocab);
        CHECK_MSG(run(dev, ids, ld, td) == 0, "%s", g4_error());
        CHECK_MSG(run(host, ids, lh, th) == 0, "%s", g4_error());
        size_t bad = 0, nan = 0;
        for (size_t i = 0; i < n; i++) {
            nan += ld[i] != ld[i];
            bad += memcmp(&ld[i], &lh[i], sizeof(float)) != 0;
        }
        CHECK_MSG(nan == 0 && bad == 0, "prefill logits: %zu NaN, %zu of %zu differ", nan, bad, n);
        CHECK_MSG(memcmp(td, th, sizeof td) == 0, "greedy tokens differ (first %d vs %d)", td[0],
                  th[0]);
        printf("ple host vs device: %zu logits bit-identical, %d greedy tokens equal, table %.1f "
               "MiB off the device\n",
               n, STEPS, ple / 1048576.0);
        free(ld);
        free(lh);
    }
    g4_text_model_free(dev);
    g4_text_model_free(host);
    g4_package_close(p);
    return g4t_finish("test_cuda_ple_host");
}
