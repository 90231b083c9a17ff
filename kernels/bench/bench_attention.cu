// bench_attention.cu: `g4cu bench --kernels` rows for the attention kernels at E2B shapes
// (decode at 4k-32k context, prefill, vision, audio). Each row states the bytes the op must
// move and its FLOPs (kbench.h). Inputs rotate through enough copies to exceed the L2.
// Baselines: the prefill rows time the HMMA kernel (attention_prefill.cu) next to the production
// WGMMA one ("hmma"); otherwise none. cuDNN's fused SDPA (graph API) was not wired: it needs the
// frontend's operation graph, and it could not be validated without a GPU here; bench/NOTES.md.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "kernels/attention_audio.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/bench/attnops_bench.cuh"

using g4b::NoBase;
using g4b::Pool;

namespace {

// Decode: 8 query heads on one KV head, T = 1, the last token at L - 1. Bytes: the visible
// K and V rows (+ q and out, negligible).
// merge 1: the merge inside the split kernel (G4_ATTN_MERGE=cluster), row attn_decode_cm.
// cap: the caches' capacity (0: L), which sets the grid (the split count follows it, not L): the
// engine's caches hold the whole context, so its short-context launches run the grid of a long
// one whose CTAs past the length exit at once ("cap=" rows).
int bench_decode(const char *filter, int reps, g4_kbench_row *rows, int n, int max, int hd, int L,
                 int window, int merge, int cap = 0) {
    char shape[96];
    if (cap > L)
        snprintf(shape, sizeof shape, "hd=%d h=8 kv=1 T=1 L=%d cap=%d win=%d", hd, L, cap, window);
    else
        snprintf(shape, sizeof shape, "hd=%d h=8 kv=1 T=1 L=%d win=%d", hd, L, window), cap = L;
    const char *name = merge ? "attn_decode_cm" : "attn_decode";
    if (!g4b::match(filter, name, shape)) return n;
    Pool pool;
    const int nh = 8, visible = window > 0 && window < L ? window : L;
    const double kv_bytes = 2.0 * visible * hd * 2;
    const int copies = g4_kbench_copies((size_t)(2.0 * L * hd * 2));
    // Copy c's cache starts at row c L of one buffer of (copies - 1) L + cap rows: the kernel
    // reads rows < L only, so each copy has cap rows inside the buffer without cap x copies.
    const size_t buf_rows = (size_t)(copies - 1) * L + cap;
    uint16_t *kbuf = pool.f16(buf_rows * hd, 11, -0.25f, 0.25f);
    uint16_t *vbuf = pool.f16(buf_rows * hd, 111, -1, 1);
    std::vector<uint16_t *> kc(copies), vc(copies);
    for (int c = 0; c < copies; c++)
        kc[c] = kbuf + (size_t)c * L * hd, vc[c] = vbuf + (size_t)c * L * hd;
    uint16_t *q = pool.f16((size_t)nh * hd, 7, -1, 1);
    uint16_t *out = static_cast<uint16_t *>(pool.alloc(2 * (size_t)nh * hd));
    const int32_t pos_h = L - 1;
    int32_t *pos = pool.upload(&pos_h, 1);
    const size_t ws_bytes = g4_attn_decode_workspace(1, nh, 1, hd, cap);
    void *ws = pool.alloc(ws_bytes);
    G4_CUDA_CHECK(cudaMemset(ws, 0, ws_bytes)); // (the merge's tickets start at zero)
    g4_attn_decode_set_merge(merge);            // (read at capture: the graph keeps the form)
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_attn_decode(out, q, kc[c], vc[c], pos, 1, nh, 1, hd, cap, window, 1.0f, ws, ws_bytes,
                       st);
    };
    struct Unforce {
        ~Unforce() { g4_attn_decode_set_merge(-1); }
    } unforce;
    return g4b::add_row(rows, n, max, name, shape, kv_bytes + 4.0 * nh * hd,
                        4.0 * nh * hd * visible, reps, copies, ours, NoBase(), nullptr);
}

// Visible (query, key) pairs of a causal prefill of T tokens from position 0 (window 0: full).
double prefill_pairs(int T, int window) {
    double p = 0;
    for (int t = 0; t < T; t++) p += window > 0 && t + 1 > window ? window : t + 1;
    return p;
}

int bench_prefill(const char *filter, int reps, g4_kbench_row *rows, int n, int max, int hd, int T,
                  int window) {
    char shape[96];
    snprintf(shape, sizeof shape, "hd=%d h=8 kv=1 T=%d win=%d", hd, T, window);
    if (!g4b::match(filter, "attn_prefill", shape)) return n;
    Pool pool;
    const int nh = 8;
    const double bytes = 2.0 * T * nh * hd * 2 + 2.0 * T * hd * 2; // q, out; K, V
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> q(copies), kc(copies), vc(copies);
    for (int c = 0; c < copies; c++) {
        q[c] = pool.f16((size_t)T * nh * hd, 21 + c, -1, 1);
        kc[c] = pool.f16((size_t)T * hd, 31 + c, -0.25f, 0.25f);
        vc[c] = pool.f16((size_t)T * hd, 41 + c, -1, 1);
    }
    uint16_t *out = static_cast<uint16_t *>(pool.alloc(2 * (size_t)T * nh * hd));
    std::vector<int32_t> pos_h(T);
    for (int t = 0; t < T; t++) pos_h[t] = t;
    int32_t *pos = pool.upload(pos_h.data(), (size_t)T);
    auto ours = [&](int rep, cudaStream_t st) { // the production path (WGMMA for hd 256 / 512)
        const int c = rep % copies;
        g4_attn_prefill(out, q[c], kc[c], vc[c], pos, T, nh, 1, hd, T, window, 1.0f, st);
    };
    auto hmma = [&](int rep, cudaStream_t st) { // the mma.sync kernel as the baseline column
        const int c = rep % copies;
        g4_attn_prefill_algo(out, q[c], kc[c], vc[c], pos, T, nh, 1, hd, T, window, 1.0f,
                             G4_ATTN_HMMA, 0, st);
    };
    const double flops = 4.0 * nh * hd * prefill_pairs(T, window);
    return g4b::add_row(rows, n, max, "attn_prefill", shape, bytes, flops, reps, copies, ours,
                        hmma, "hmma");
}

// cfg: g4_attn_bidir_cfg's tile configuration for "ours" (the baseline column is cfg 1, the
// configuration before: 3 CTAs per SM).
int bench_bidir(const char *filter, int reps, g4_kbench_row *rows, int n, int max, int N,
                int n_pad, int cfg) {
    char shape[96];
    snprintf(shape, sizeof shape, "hd=64 h=12 N=%d pad=%d cfg=%d", N, n_pad, cfg);
    if (!g4b::match(filter, "attn_bidir", shape)) return n;
    Pool pool;
    const int nh = 12, hd = 64, w = nh * hd;
    const double bytes = 4.0 * N * w * 2 + N;
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> q(copies), k(copies), v(copies);
    for (int c = 0; c < copies; c++) {
        q[c] = pool.f16((size_t)N * w, 51 + c, -1, 1);
        k[c] = pool.f16((size_t)N * w, 61 + c, -0.5f, 0.5f);
        v[c] = pool.f16((size_t)N * w, 71 + c, -1, 1);
    }
    std::vector<uint8_t> kv_h(N);
    for (int i = 0; i < N; i++) kv_h[i] = i < N - n_pad;
    uint8_t *kv = pool.upload(kv_h.data(), (size_t)N);
    uint16_t *out = static_cast<uint16_t *>(pool.alloc(2 * (size_t)N * w));
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_attn_bidir_cfg(out, q[c], k[c], v[c], n_pad ? kv : nullptr, N, nh, hd, 1.0f, cfg, st);
    };
    auto before = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_attn_bidir_cfg(out, q[c], k[c], v[c], n_pad ? kv : nullptr, N, nh, hd, 1.0f, 1, st);
    };
    const double flops = 4.0 * nh * hd * (double)N * (N - n_pad);
    return g4b::add_row(rows, n, max, "attn_bidir", shape, bytes, flops, reps, copies, ours,
                        before, "3/SM");
}

int bench_audio(const char *filter, int reps, g4_kbench_row *rows, int n, int max, int T) {
    char shape[96];
    snprintf(shape, sizeof shape, "h=8 hd=128 T=%d band=12", T);
    if (!g4b::match(filter, "attn_audio", shape)) return n;
    Pool pool;
    const int nh = 8, hd = 128, w = nh * hd;
    const double bytes = 4.0 * T * w * 2 + 12.0 * w * 2;
    const int copies = g4_kbench_copies((size_t)bytes);
    std::vector<uint16_t *> q(copies), k(copies), v(copies);
    for (int c = 0; c < copies; c++) {
        q[c] = pool.f16((size_t)T * w, 81 + c, -1, 1);
        k[c] = pool.f16((size_t)T * w, 91 + c, -1, 1);
        v[c] = pool.f16((size_t)T * w, 101 + c, -1, 1);
    }
    uint16_t *rel = pool.f16((size_t)12 * w, 5, -0.5f, 0.5f);
    float *pds = pool.f32((size_t)hd, 6, -1, 1);
    uint16_t *out = static_cast<uint16_t *>(pool.alloc(2 * (size_t)T * w));
    auto ours = [&](int rep, cudaStream_t st) {
        const int c = rep % copies;
        g4_attn_audio(out, q[c], k[c], v[c], rel, pds, nullptr, T, nh, hd, 12, 12, 50.0f, -1e9f,
                      st);
    };
    const double flops = 6.0 * nh * hd * 12.0 * T; // q.k, q.R, p v per visible key
    return g4b::add_row(rows, n, max, "attn_audio", shape, bytes, flops, reps, copies, ours,
                        NoBase(), nullptr);
}

} // namespace

extern "C" int g4_kbench_attention(const char *filter, int reps, g4_kbench_row *rows, int max) {
    int n = 0;
    // decode: the global layers (hd 512, full causal) at 4k-32k; sliding (hd 256, window 512)
    const int Ls[] = {4096, 8192, 16384, 32768};
    for (int merge = 0; merge <= 1; merge++) {
        for (int L : Ls) n = bench_decode(filter, reps, rows, n, max, 512, L, 0, merge);
        n = bench_decode(filter, reps, rows, n, max, 256, 32768, 0, merge);
        n = bench_decode(filter, reps, rows, n, max, 256, 4096, 512, merge);
        n = bench_decode(filter, reps, rows, n, max, 256, 128, 512, merge); // decode after 128
        n = bench_decode(filter, reps, rows, n, max, 512, 128, 0, merge);
        // the same after 128 on the grid of 32k caches, as the engine launches it
        n = bench_decode(filter, reps, rows, n, max, 256, 128, 512, merge, 32768);
        n = bench_decode(filter, reps, rows, n, max, 512, 128, 0, merge, 32768);
        // where the merge inside starts to pay on the full layers (G4_ATTN_MERGE_LONG)
        for (int L : {256, 512, 1024, 2048})
            n = bench_decode(filter, reps, rows, n, max, 512, L, 0, merge, 32768);
    }
    // prefill (issue 22: hd 256 and 512 at 4k-16k; the baseline column is the HMMA kernel)
    const int Ts[] = {512, 2048, 4096, 8192, 16384};
    for (int T : Ts) n = bench_prefill(filter, reps, rows, n, max, 256, T, 512);
    for (int T : Ts) n = bench_prefill(filter, reps, rows, n, max, 512, T, 0);
    n = bench_prefill(filter, reps, rows, n, max, 256, 4096, 0);
    n = bench_prefill(filter, reps, rows, n, max, 256, 16384, 0);
    // vision and audio
    for (int cfg = 0; cfg <= 2; cfg += 2) { // the default and key tiles of 32, vs 3 CTAs per SM
        n = bench_bidir(filter, reps, rows, n, max, 2304, 0, cfg);
        n = bench_bidir(filter, reps, rows, n, max, 2520, 216, cfg);
    }
    n = bench_audio(filter, reps, rows, n, max, 750);
    return n;
}
