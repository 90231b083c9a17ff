// test_generate.c: generation (engine/generate.c), the one decode step (g4_text_step) and the
// sample op (kernels/ref/logits.c, kernels/ref/sample_math.h) on the CPU backend.
//
//  1. the draw: SplitMix64 outputs equal the fixture's (tools/python/make_sample_fixture.py,
//     from the published algorithm);
//  2. the sample op's reference against HF: on the fixture's logits, the tokens it can draw are
//     exactly those HF's TemperatureLogitsWarper + TopKLogitsWarper + TopPLogitsWarper leave
//     (ties at the k-th kept), and its picks for draws 0..7 are the fixture's (computed in
//     exact Python integers from the documented arithmetic); greedy = first maximum; NaN is
//     an internal error; the sampled frequencies match the renormalised probabilities (20000
//     draws: a 5-sigma bound, sigma = sqrt(p (1 - p) / n) <= 0.0036, so a correct sampler
//     fails with probability < 1e-6); the backend op (soft-cap + pick, V = 262144 and an odd
//     V) equals a direct computation written here (qsort, libm exp);
//  3. greedy generation on both tiny packages equals HF's greedy `generate` (the fixture's
//     ids; exact: ids are discrete, and the fixture records the smallest top-2 logit gap HF
//     saw, >= 4e-4, far above our ~1e-6 relative logit error), with the prefill in one chunk,
//     in chunks of 7 and token by token; and equals the old path's algorithm (eager forwards,
//     logits on the host, first argmax), run here;
//  4. stop strings (the fixture's, cut where Python's str.find cuts, after as many tokens as
//     an engine checking after every token needs), --ignore-stop, "\n\n", max_new, extra EOS
//     ids, ignore_eos, the context limit (tiny2's 128 positions), streaming (the pieces are
//     valid UTF-8 and add up to the text, with and without a stop string);
//  5. sampling is reproducible with a seed and changes with it, and each sampled token is what
//     a direct computation picks from the teacher-forced logits with draw index = position;
//     soft tokens reach the right placeholders whatever the chunking (same tokens for chunks
//     of 1, 3 and all), through the scatter op (checked on its own too);
//  6. model vs state: two states alive at once on one model, their steps interleaved, give the
//     tokens each gives alone; a state allocates no backend memory after its first request
//     (requests of other lengths, greedy and sampled; backend alloc_count), and grows only for
//     a request larger than it;
//  7. bad parameters are user errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "eval/pystr.h"
#include "kernels/ref/ref.h"
#include "tests/chat_fixture.h"
#include "tests/state_check.h"
#include "tests/test_util.h"

// --- 1. the draw ------------------------------------------------------------------------------
static void test_splitmix(const cf_lines *l) {
    int n = 0;
    for (int c = 0; c < l->n; c++) {
        const cJSON *o = l->line[c];
        if (strcmp(cf_str(o, "kind"), "splitmix")) continue;
        uint64_t seed = strtoull(cf_str(o, "seed"), NULL, 10);
        const cJSON *want = cJSON_GetObjectItem(o, "u64");
        for (int i = 0; i < cJSON_GetArraySize(want); i++) {
            uint64_t w = strtoull(cJSON_GetArrayItem(want, i)->valuestring, NULL, 10);
            uint64_t g = g4_sample_u64(seed, (uint64_t)i);
            CHECK_MSG(g == w, "seed %llu draw %d: %llu, expected %llu", (unsigned long long)seed,
                      i, (unsigned long long)g, (unsigned long long)w);
        }
        n++;
    }
    CHECK(n >= 3);
}

// --- 2. sampler ---------------------------------------------------------------------------------
// Draws n tokens (draw indices 0..n-1 of one seed) and returns the frequency of each of V tokens.
static void freqs(const g4_sampler *s, const float *logits, int V, int n, double *f) {
    memset(f, 0, sizeof(double) * (size_t)V);
    for (int i = 0; i < n; i++) {
        int t = -1;
        CHECK(g4_sample(s, logits, V, 12345, (uint32_t)i, &t) == G4_OK);
        if (t >= 0 && t < V) f[t] += 1.0 / n;
    }
}

static void check_freqs(const char *what, const double *f, const double *p, int V, int n) {
    for (int i = 0; i < V; i++) {
        double sigma = sqrt(p[i] * (1 - p[i]) / n);
        CHECK_MSG(fabs(f[i] - p[i]) <= 5 * sigma + 1e-12, "%s: token %d frequency %.4f, p %.4f",
                  what, i, f[i], p[i]);
    }
}

static int cmp_int(const void *a, const void *b) {
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

// The fixture's logits: the reference keeps HF's tokens and picks the fixture's ids.
static void test_warp_cases(const cf_lines *l) {
    int n_cases = 0, n_ties = 0;
    for (int c = 0; c < l->n; c++) {
        const cJSON *o = l->line[c];
        if (strcmp(cf_str(o, "kind"), "warp")) continue;
        const int V = cf_int(o, "V");
        const cJSON *lg = cJSON_GetObjectItem(o, "logits");
        float *x = g4_malloc(sizeof(float) * (size_t)V);
        for (int i = 0; i < V; i++) x[i] = (float)cJSON_GetArrayItem(lg, i)->valuedouble;
        g4_sampler smp = {(float)cJSON_GetObjectItem(o, "temperature")->valuedouble,
                          cf_int(o, "top_k"), (float)cJSON_GetObjectItem(o, "top_p")->valuedouble};
        const uint64_t seed = strtoull(cf_str(o, "seed"), NULL, 10);
        int n_kept, n_picks;
        int *kept = cf_ints(o, "kept", &n_kept), *picks = cf_ints(o, "picks", &n_picks);
        g4_sample_params p = {smp.temperature, smp.top_k, smp.top_p, (uint32_t)seed,
                              (uint32_t)(seed >> 32), {0}};
        int32_t *ours = g4_malloc(sizeof(int32_t) * (size_t)V);
        int n_ours = ref_sample_kept(x, V, &p, ours);
        qsort(ours, (size_t)(n_ours > 0 ? n_ours : 0), sizeof(int32_t), cmp_int);
        CHECK_MSG(n_ours == n_kept && !memcmp(ours, kept, sizeof(int) * (size_t)n_kept),
                  "case %d (V %d, T %g, top_k %d, top_p %g): %d tokens kept, HF keeps %d", n_cases,
                  V, (double)smp.temperature, smp.top_k, (double)smp.top_p, n_ours, n_kept);
        for (int n = 0; n < n_picks; n++) {
            int t = -1;
            CHECK(g4_sample(&smp, x, V, seed, (uint32_t)n, &t) == G4_OK);
            CHECK_MSG(t == picks[n], "case %d draw %d: picked %d, the fixture %d", n_cases, n, t,
                      picks[n]);
        }
        n_ties += cJSON_IsTrue(cJSON_GetObjectItem(o, "ties"));
        n_cases++;
        free(x), free(kept), free(picks), free(ours);
    }
    CHECK_MSG(n_cases >= 12 && n_ties >= 2, "%d warp cases (%d with ties)", n_cases, n_ties);
    printf("sampler vs HF warpers and the exact picks: %d cases (%d with ties at the k-th)\n",
           n_cases, n_ties);
}

static void test_sampler(void) {
    int t;
    const float tie[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    g4_sampler greedy = {0, 0, 1};
    CHECK(g4_sample(&greedy, tie, 5, 1, 0, &t) == G4_OK && t == 1); // first of two maxima
    float nan_l[3] = {0.1f, NAN, 0.3f};
    CHECK(g4_sample(&greedy, nan_l, 3, 1, 0, &t) == G4_EINTERNAL);
    g4_sampler hot = {1.0f, 0, 1};
    CHECK(g4_sample(&hot, nan_l, 3, 1, 0, &t) == G4_EINTERNAL);
    const float neg_inf[3] = {-INFINITY, 0.0f, -INFINITY};
    for (int i = 0; i < 50; i++) CHECK(g4_sample(&hot, neg_inf, 3, 1, (uint32_t)i, &t) == G4_OK && t == 1);

    // p = (0.5, 0.3, 0.2) as logits ln p (plus a constant: softmax ignores it)
    const float l3[4] = {logf(0.5f) + 3, logf(0.3f) + 3, logf(0.2f) + 3, -INFINITY};
    const int N = 20000;
    double f[5];
    freqs(&hot, l3, 4, N, f);
    check_freqs("T=1", f, (double[]){0.5, 0.3, 0.2, 0}, 4, N);
    g4_sampler k2 = {1.0f, 2, 1};
    freqs(&k2, l3, 4, N, f); // top-2: renormalised 0.5 / 0.8, 0.3 / 0.8
    check_freqs("top_k 2", f, (double[]){0.625, 0.375, 0, 0}, 4, N);
    g4_sampler k1 = {5.0f, 1, 1};
    freqs(&k1, l3, 4, 200, f);
    CHECK(fabs(f[0] - 1.0) < 1e-9); // (a sum of n terms 1/n)
    // top_p 0.6: token 2 has 0.5 above it (< 0.6, kept), token 3 has 0.8 (dropped)
    g4_sampler p6 = {1.0f, 0, 0.6f};
    freqs(&p6, l3, 4, N, f);
    check_freqs("top_p 0.6", f, (double[]){0.625, 0.375, 0, 0}, 4, N);
    // top_p 0.45: token 2 has 0.5 above it: dropped (HF removes cumsum <= 1 - top_p)
    g4_sampler p5 = {1.0f, 0, 0.45f};
    freqs(&p5, l3, 4, 500, f);
    CHECK(fabs(f[0] - 1.0) < 1e-9); // (a sum of n terms 1/n)
    // temperature 2: p ~ sqrt(p)
    double s = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    g4_sampler t2 = {2.0f, 0, 1};
    freqs(&t2, l3, 4, N, f);
    check_freqs("T=2", f, (double[]){sqrt(0.5) / s, sqrt(0.3) / s, sqrt(0.2) / s, 0}, 4, N);
    // top-k ties: every logit >= the k-th largest stays (HF), here 3 equal at the 2nd place
    const float ties[5] = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f};
    g4_sampler k2t = {1.0f, 2, 1};
    freqs(&k2t, ties, 5, N, f);
    const double e1 = exp(-1.0), zt = 1 + 3 * e1;
    check_freqs("top_k 2 with ties", f, (double[]){0, 1 / zt, e1 / zt, e1 / zt, e1 / zt}, 5, N);
    // top-k over a larger vocabulary: only the 3 largest ever appear
    float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (float)((i * 7919) % 1000) * 1e-3f;
    g4_sampler k3 = {1.0f, 3, 1};
    for (int i = 0; i < 300; i++) {
        CHECK(g4_sample(&k3, big, 1000, 3, (uint32_t)i, &t) == G4_OK);
        CHECK(big[t] >= 0.997f);
    }
}

// --- a direct computation of the pick, written apart from kernels/ref/logits.c ---------------
typedef struct {
    float x;
    int id;
} tok;

static int tok_desc(const void *a, const void *b) {
    const tok *p = a, *q = b;
    if (p->x != q->x) return p->x > q->x ? -1 : 1;
    return (p->id > q->id) - (p->id < q->id);
}

// The documented pick (generate.h, kernels/ref/sample_math.h) from capped logits x[V].
static int direct_pick(const float *x, int V, const g4_sampler *smp, uint64_t seed, uint32_t n) {
    if (!(smp->temperature > 0)) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        return best;
    }
    tok *t = g4_malloc(sizeof(tok) * (size_t)V);
    for (int i = 0; i < V; i++) t[i] = (tok){x[i] == 0.0f ? 0.0f : x[i], i};
    qsort(t, (size_t)V, sizeof *t, tok_desc);
    int m = V;
    if (smp->top_k > 0 && smp->top_k < V) {
        m = 0;
        while (m < V && t[m].x >= t[smp->top_k - 1].x) m++;
    }
    unsigned long long *w = g4_malloc(sizeof(unsigned long long) * (size_t)m), z = 0;
    for (int j = 0; j < m; j++) {
        const double e = exp(((double)t[j].x - (double)t[0].x) / (double)smp->temperature);
        z += w[j] = (unsigned long long)floor(e * 1099511627776.0); // 2^40
    }
    if (smp->top_p < 1) {
        const unsigned long long point = (unsigned long long)ceil((double)smp->top_p * (double)z) - 1;
        unsigned long long a = 0;
        for (int j = 0; j < m; j++)
            if ((a += w[j]) > point) {
                m = j + 1, z = a;
                break;
            }
    }
    uint64_t u = seed + (uint64_t)(n + 1) * 0x9e3779b97f4a7c15ull; // SplitMix64 output n
    u = (u ^ (u >> 30)) * 0xbf58476d1ce4e5b9ull;
    u = (u ^ (u >> 27)) * 0x94d049bb133111ebull;
    u ^= u >> 31;
    const unsigned long long r = (unsigned long long)(((unsigned __int128)(u >> 11) * z) >> 53);
    int id = t[m - 1].id;
    unsigned long long a = 0;
    for (int j = 0; j < m; j++)
        if ((a += w[j]) > r) {
            id = t[j].id;
            break;
        }
    free(w);
    free(t);
    return id;
}

// The CPU backend's sample op (soft-cap in place + pick) on random logits against the direct
// computation, at E2B's vocabulary and an odd one, greedy and three samplers.
static void test_sample_op(void) {
    g4_backend *be = g4_backend_cpu();
    const int Vs[2] = {262144, 1001};
    const g4_sampler smps[4] = {{0, 0, 1}, {1.0f, 64, 0.95f}, {0.8f, 0, 0.9f}, {1.3f, 0, 1}};
    unsigned long long st = 99;
    int n = 0;
    for (int v = 0; v < 2; v++) {
        const int V = Vs[v], draws = V > 10000 ? 3 : 12;
        g4_buf lg = g4_buf_new(be, G4_F32, 1, V), next = g4_buf_new(be, G4_I32, 1, 1),
               cnt = g4_buf_new(be, G4_I32, 1, 1);
        float *raw = g4_malloc(sizeof(float) * (size_t)V), *capped = g4_malloc(sizeof(float) * (size_t)V);
        for (int i = 0; i < V; i++) raw[i] = g4t_rand_uniform(&st, -45.0f, 45.0f);
        for (int i = 0; i < V; i++) capped[i] = 30.0f * tanhf(raw[i] / 30.0f);
        for (int k = 0; k < 4; k++)
            for (int d = 0; d < draws; d++) {
                const uint64_t seed = 0x1234567890ull + (uint64_t)k;
                const g4_sample_params p = {smps[k].temperature, smps[k].top_k, smps[k].top_p,
                                            (uint32_t)seed, (uint32_t)(seed >> 32), {0}};
                memcpy(lg.data, raw, sizeof(float) * (size_t)V);
                ((int32_t *)cnt.data)[0] = 1000 + d;
                be->sample(be, &next, &lg, 30.0f, &p, &cnt);
                CHECK_MSG(!memcmp(lg.data, capped, sizeof(float) * (size_t)V),
                          "V %d: the op's soft-cap differs from 30 tanh(x / 30)", V);
                const int want = direct_pick(capped, V, &smps[k], seed, (uint32_t)(1000 + d));
                CHECK_MSG(((int32_t *)next.data)[0] == want,
                          "V %d sampler %d draw %d: the op picked %d, the direct computation %d", V,
                          k, d, ((int32_t *)next.data)[0], want);
                n++;
            }
        // a NaN row: -1
        ((float *)lg.data)[V / 2] = NAN;
        be->sample(be, &next, &lg, 30.0f, &(g4_sample_params){1.0f, 0, 1.0f, 1, 0, {0}}, &cnt);
        CHECK_INT(((int32_t *)next.data)[0], -1);
        g4_buf_free(be, &lg), g4_buf_free(be, &next), g4_buf_free(be, &cnt);
        free(raw), free(capped);
    }
    printf("sample op vs the direct computation: %d picks (V 262144 and 1001)\n", n);
}

// The scatter op: the rows with an index take their source rows, the others stay.
static void test_scatter_op(void) {
    g4_backend *be = g4_backend_cpu();
    const int T = 9, n = 4, C = 7;
    g4_buf dst = g4_buf_new(be, G4_F32, T, C), src = g4_buf_new(be, G4_F32, n, C),
           idx = g4_buf_new(be, G4_I32, T, 1);
    const int32_t map[9] = {-1, 2, -1, 0, 3, -1, -1, 1, -1};
    for (int i = 0; i < T * C; i++) ((float *)dst.data)[i] = -1.0f - (float)i;
    for (int i = 0; i < n * C; i++) ((float *)src.data)[i] = 100.0f + (float)i;
    memcpy(idx.data, map, sizeof map);
    be->scatter_rows(be, &dst, &src, &idx);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            const float want = map[t] < 0 ? -1.0f - (float)(t * C + c) : 100.0f + (float)(map[t] * C + c);
            bad += ((float *)dst.data)[t * C + c] != want;
        }
    CHECK_MSG(bad == 0, "scatter_rows: %d values differ", bad);
    g4_buf_free(be, &dst), g4_buf_free(be, &src), g4_buf_free(be, &idx);
}

// --- 3/4. greedy vs HF, stops, streaming ---------------------------------------------------------
typedef struct {
    char *buf;
    size_t n;
    int bad_utf8, calls;
} sink;

static void collect(void *ctx, const char *text, size_t len) {
    sink *s = ctx;
    char *piece = g4_strndup(text, len);
    if (strlen(piece) == len && g4_py_check_utf8(piece, "piece") != G4_OK) s->bad_utf8++;
    free(piece);
    s->buf = g4_realloc(s->buf, s->n + len + 1);
    memcpy(s->buf + s->n, text, len);
    s->n += len;
    s->buf[s->n] = 0;
    s->calls++;
}

typedef struct {
    g4_package *pkg;
    g4_text_model *m;
    g4_text_state *s; // every generation of the test runs on this one state
} model;

static model open_model(const char *dir) {
    model md = {0};
    if (g4_package_open(dir, &md.pkg) || g4_text_model_load(md.pkg, g4_backend_cpu(), &md.m)) {
        fprintf(stderr, "%s\n", g4_error());
        exit(1);
    }
    const g4_text_state_opts o = {64, G4_GEN_DEFAULT_CHUNK, 1, 0}; // grown by requests
    if (g4_text_state_new_opts(md.m, &o, &md.s)) {
        fprintf(stderr, "%s\n", g4_error());
        exit(1);
    }
    return md;
}

static void close_model(model *md) {
    g4_text_state_free(md->s);
    g4_text_model_free(md->m);
    g4_package_close(md->pkg);
}

static void expect_tokens(const char *what, const g4_gen_result *r, const int *want, int n_want) {
    int d = cf_first_diff(r->tokens.v, (int)r->tokens.n, want, n_want);
    CHECK_MSG(d < 0, "%s: token %d differs (got %d tokens, want %d; got %d, want %d)", what, d,
              (int)r->tokens.n, n_want, d >= 0 && d < (int)r->tokens.n ? r->tokens.v[d] : -1,
              d >= 0 && d < n_want ? want[d] : -1);
}

static void test_hf_greedy(const cf_lines *l, model *tiny, model *tiny2, const g4_tokenizer *tok) {
    int n_cases = 0;
    for (int c = 0; c < l->n; c++) {
        const cJSON *o = l->line[c];
        if (strcmp(cf_str(o, "kind"), "text")) continue;
        model *md = !strcmp(cf_str(o, "package"), "tiny2") ? tiny2 : tiny;
        const char *name = cf_str(o, "name");
        int n_prompt, n_want, n_eos;
        int *prompt = cf_ints(o, "prompt_ids", &n_prompt);
        int *want = cf_ints(o, "ids", &n_want);
        int *eos = cf_ints(o, "eos", &n_eos);
        int is_chat = cf_str(o, "text") != NULL;
        const int chunks[3] = {0, 7, 1};
        int d_old = -1;
        for (int k = 0; k < 3; k++) {
            g4_gen_params p;
            g4_gen_params_default(&p);
            p.max_new = cf_int(o, "max_new");
            p.eos = eos, p.n_eos = n_eos;
            p.prefill_chunk = chunks[k];
            g4_gen_result r;
            int rc = g4_generate(md->s, is_chat ? tok : NULL, prompt, n_prompt, NULL, &p, &r);
            CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
            char what[96];
            snprintf(what, sizeof what, "%s/%s chunk %d", cf_str(o, "package"), name, chunks[k]);
            expect_tokens(what, &r, want, n_want);
            int ended_eos = n_want < p.max_new;
            CHECK_INT(r.stop, ended_eos ? G4_STOP_EOS : G4_STOP_MAX_NEW);
            CHECK(r.n_prompt == n_prompt && r.max_new == p.max_new);
            CHECK(r.prefill_ms >= 0 && r.decode_ms >= 0 && r.decode_tok_s >= 0);
            if (is_chat) CHECK_MSG(r.text && !strcmp(r.text, cf_str(o, "text")), "%s: text", what);
            if (k == 0) { // the old path's algorithm gives the same ids
                int *old = g4_malloc(sizeof(int) * (size_t)p.max_new);
                const int n_old = sc_old_greedy(md->m, prompt, n_prompt, eos, n_eos, p.max_new, old);
                d_old = cf_first_diff(r.tokens.v, (int)r.tokens.n, old, n_old);
                CHECK_MSG(d_old < 0, "%s: token %d differs from the old path's", what, d_old);
                free(old);
            }
            g4_gen_result_free(&r);
        }
        n_cases++;
        free(prompt);
        free(want);
        free(eos);
    }
    CHECK_MSG(n_cases >= 5, "%d HF greedy cases", n_cases);
    printf("greedy vs HF generate: %d cases x 3 chunkings\n", n_cases);
}

static void test_stops(const cf_lines *l, model *tiny, const g4_tokenizer *tok) {
    const cJSON *o = NULL;
    for (int c = 0; c < l->n; c++)
        if (!strcmp(cf_str(l->line[c], "kind"), "text") && cf_str(l->line[c], "text"))
            o = l->line[c];
    CHECK(o != NULL);
    if (!o) return;
    int n_prompt, n_want, n_eos;
    int *prompt = cf_ints(o, "prompt_ids", &n_prompt);
    int *want = cf_ints(o, "ids", &n_want);
    int *eos = cf_ints(o, "eos", &n_eos);
    const char *full = cf_str(o, "text");
    const cJSON *stops = cJSON_GetObjectItem(o, "stops");
    int n_nn = 0;
    for (int i = 0; i < cJSON_GetArraySize(stops); i++) {
        const cJSON *st = cJSON_GetArrayItem(stops, i);
        const char *stop = cf_str(st, "stop");
        n_nn += !strcmp(stop, "\n\n");
        for (int ignore = 0; ignore < 2; ignore++) {
            sink sk = {0};
            const char *stop_list[2] = {"never-in-this-text", stop};
            g4_gen_params p;
            g4_gen_params_default(&p);
            p.max_new = cf_int(o, "max_new");
            p.eos = eos, p.n_eos = n_eos;
            p.stop = stop_list, p.n_stop = 2;
            p.ignore_stop = &stop, p.n_ignore_stop = ignore;
            p.on_text = collect, p.on_text_ctx = &sk;
            g4_gen_result r;
            CHECK_MSG(g4_generate(tiny->s, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK, "%s",
                      g4_error());
            const char *want_text = ignore ? full : cf_str(st, "text");
            int want_n = ignore ? n_want : cf_int(st, "n_tokens");
            CHECK_MSG(r.text && !strcmp(r.text, want_text), "stop '%s' ignore %d: text '%s'", stop,
                      ignore, r.text ? r.text : "(null)");
            CHECK_MSG((int)r.tokens.n == want_n, "stop '%s' ignore %d: %d tokens, want %d", stop,
                      ignore, (int)r.tokens.n, want_n);
            expect_tokens("stop prefix", &r, want,
                          (int)r.tokens.n); // the same ids as far as it went
            CHECK_INT(r.stop, ignore ? G4_STOP_MAX_NEW : G4_STOP_STRING);
            if (!ignore) CHECK(r.stop_string && !strcmp(r.stop_string, stop));
            CHECK_MSG(sk.buf ? !strcmp(sk.buf, want_text) : !*want_text,
                      "stop '%s' ignore %d: streamed '%s'", stop, ignore, sk.buf ? sk.buf : "");
            CHECK(sk.bad_utf8 == 0);
            free(sk.buf);
            g4_gen_result_free(&r);
        }
    }
    CHECK_MSG(n_nn == 1, "the fixture has no \"\\n\\n\" stop case");

    // max_new, and an extra EOS id (the 7th generated id, absent before it)
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.eos = eos, p.n_eos = n_eos;
    p.max_new = 5;
    g4_gen_result r;
    CHECK(g4_generate(tiny->s, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    expect_tokens("max_new 5", &r, want, 5);
    CHECK_INT(r.stop, G4_STOP_MAX_NEW);
    g4_gen_result_free(&r);
    int k = 6;
    for (int i = 0; i < k; i++)
        if (want[i] == want[k]) k = i; // the first occurrence of that id
    int extra[4] = {eos[0], n_eos > 1 ? eos[1] : eos[0], want[k], 999999};
    p.eos = extra, p.n_eos = 4;
    p.max_new = 40;
    CHECK(g4_generate(tiny->s, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    expect_tokens("extra eos", &r, want, k + 1);
    CHECK_INT(r.stop, G4_STOP_EOS);
    CHECK_INT(r.stop_id, want[k]);
    g4_gen_result_free(&r);
    // ignore_eos: the same ids, on past that EOS id, to max_new
    p.ignore_eos = 1;
    p.max_new = 12;
    CHECK(g4_generate(tiny->s, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    expect_tokens("ignore_eos", &r, want, 12);
    CHECK_INT(r.stop, G4_STOP_MAX_NEW);
    CHECK_INT(r.tokens.n, 12);
    g4_gen_result_free(&r);
    p.ignore_eos = 0;

    // streaming without stop strings: pieces add up to the text (random tiny-model text has
    // many byte-fallback pieces, so this exercises holding back unfinished byte runs)
    sink sk = {0};
    g4_gen_params_default(&p);
    p.max_new = 60;
    p.on_text = collect, p.on_text_ctx = &sk;
    p.sampler = (g4_sampler){1.0f, 0, 1};
    p.seed = 99;
    CHECK(g4_generate(tiny->s, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    CHECK(r.text && sk.buf && sk.n == r.text_len && !memcmp(sk.buf, r.text, sk.n));
    CHECK(sk.bad_utf8 == 0 && sk.calls > 1);
    free(sk.buf);
    g4_gen_result_free(&r);
    free(prompt);
    free(want);
    free(eos);
}

// --- the streamed text on hand-made id sequences
// ---------------------------------------------------
static void append_text(const g4_tokenizer *tok, g4_ids *ids, const char *text) {
    G4_ASSERT(g4_tokenizer_encode(tok, text, strlen(text), 0, ids) == G4_OK);
}

static int piece_id(const g4_tokenizer *tok, const char *piece) {
    int id = g4_tokenizer_id(tok, piece, strlen(piece));
    G4_ASSERT(id >= 0);
    return id;
}

// Streams ids token by token (what was passed on after token k goes to seen[k - 1] when seen is
// given), then finishes with the final text, cut before the stop string as the generation loop
// cuts it. Returns everything passed on; *final is the final text.
static char *stream_ids(const g4_tokenizer *tok, const g4_ids *ids, const char *stop, char **final,
                        int *bad_utf8, char **seen) {
    sink sk = {0};
    g4_text_stream ts;
    const char *stops[1] = {stop};
    g4_text_stream_init(&ts, tok, stops, stop ? 1 : 0, collect, &sk);
    for (size_t n = 1; n <= ids->n; n++) {
        CHECK(g4_text_stream_update(&ts, ids->v, n) == G4_OK);
        if (seen) seen[n - 1] = g4_strdup(sk.buf ? sk.buf : "");
    }
    size_t len;
    CHECK(g4_tokenizer_decode(tok, ids->v, ids->n, 1, final, &len) == G4_OK);
    int which;
    long cut = g4_find_stop(stops, stop ? 1 : 0, *final, len, &which);
    if (cut >= 0) (*final)[len = (size_t)cut] = 0;
    g4_text_stream_finish(&ts, *final, len);
    g4_text_stream_free(&ts);
    *bad_utf8 = sk.bad_utf8;
    return sk.buf ? sk.buf : g4_strdup("");
}

static void test_text_stream(const g4_tokenizer *tok) {
    const int c3 = piece_id(tok, "<0xC3>"), a9 = piece_id(tok, "<0xA9>");
    const int x81 = piece_id(tok, "<0x81>"), eos = piece_id(tok, "<eos>");
    // byte pieces (and a special token) between "Hello" and " world": decoding them one more
    // token at a time changes text already decoded, which must not have been passed on
    const int seqs[3][4] = {{c3, a9, -1}, {c3, eos, a9, -1}, {c3, a9, x81, -1}};
    for (int c = 0; c < 3; c++) {
        g4_ids ids = {0};
        append_text(tok, &ids, "Hello");
        for (int k = 0; k < 4 && seqs[c][k] >= 0; k++) g4_ids_push(&ids, seqs[c][k]);
        append_text(tok, &ids, " world");
        char *final = NULL;
        int bad;
        char *got = stream_ids(tok, &ids, NULL, &final, &bad, NULL);
        CHECK_MSG(!strcmp(got, final), "byte run %d: streamed '%s', final '%s'", c, got, final);
        CHECK_MSG(bad == 0, "byte run %d: a streamed piece is not valid UTF-8", c);
        free(got);
        free(final);
        g4_ids_free(&ids);
    }
    // a stop string's start is held back until it is known not to be the stop string
    CHECK(g4_tokenizer_id(tok, "\n", 1) >=
          0); // "\n" is a piece, not a byte: only the stop holds it
    g4_ids ids = {0};
    append_text(tok, &ids, "ab");
    size_t n_ab = ids.n;
    g4_ids_push(&ids, piece_id(tok, "\n"));
    append_text(tok, &ids, "cd");
    char *seen[32] = {0}, *final = NULL;
    int bad;
    G4_ASSERT(ids.n <= 32);
    char *got = stream_ids(tok, &ids, "\n\n", &final, &bad, seen);
    CHECK_MSG(!strcmp(seen[n_ab], "ab"), "after 'ab\\n': streamed '%s'", seen[n_ab]);
    CHECK(!strcmp(final, "ab\ncd") && !strcmp(got, final));
    for (size_t i = 0; i < ids.n; i++) free(seen[i]);
    free(got), free(final);
    g4_ids_free(&ids);
    append_text(tok, &ids, "ab");
    g4_ids_push(&ids, piece_id(tok, "\n"));
    g4_ids_push(&ids, piece_id(tok, "\n"));
    got = stream_ids(tok, &ids, "\n\n", &final, &bad, NULL);
    CHECK(!strcmp(final, "ab") && !strcmp(got, "ab"));
    free(got), free(final);
    g4_ids_free(&ids);
    // the earliest stop string wins
    const char *stops[3] = {"END", "STOP", "zz"};
    int which = -1;
    CHECK(g4_find_stop(stops, 3, "xxSTOPyyEND", 11, &which) == 2 && which == 1);
    CHECK(g4_find_stop(stops, 3, "nothing", 7, &which) == -1);
}

// --- 5. sampling with seeds, soft tokens, context
// -------------------------------------------------
static void test_sampling_seed(model *tiny) {
    int prompt[6] = {2, 50, 60, 70, 80, 90};
    g4_gen_result a, b, c;
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.max_new = 16;
    p.ignore_eos = 1;
    p.sampler = (g4_sampler){0.8f, 40, 0.9f};
    p.seed = 7;
    CHECK(g4_generate(tiny->s, NULL, prompt, 6, NULL, &p, &a) == G4_OK);
    CHECK(g4_generate(tiny->s, NULL, prompt, 6, NULL, &p, &b) == G4_OK);
    p.seed = 8;
    CHECK(g4_generate(tiny->s, NULL, prompt, 6, NULL, &p, &c) == G4_OK);
    CHECK(cf_first_diff(a.tokens.v, (int)a.tokens.n, b.tokens.v, (int)b.tokens.n) < 0);
    CHECK(cf_first_diff(a.tokens.v, (int)a.tokens.n, c.tokens.v, (int)c.tokens.n) >= 0);
    CHECK(a.text == NULL);
    // Each sampled token is the direct computation's pick from the teacher-forced logits of the
    // same prefix, with draw index = the position of the row it comes from.
    const int V = tiny->m->cfg->vocab, n = (int)a.tokens.n;
    g4_text_state *s;
    CHECK(g4_text_state_new(tiny->m, 6 + n, 6, &s) == G4_OK);
    float *lg = g4_malloc(sizeof(float) * (size_t)V);
    int same = 0, rc = g4_text_forward(s, prompt, 6, NULL, lg, 0);
    for (int i = 0; i < n && !rc; i++) {
        same += direct_pick(lg, V, &p.sampler, 7, (uint32_t)(5 + i)) == a.tokens.v[i];
        const int32_t fed = a.tokens.v[i];
        if (i + 1 < n) rc = g4_text_forward(s, &fed, 1, NULL, lg, 0);
    }
    CHECK_MSG(rc == G4_OK && same == n, "sampled tokens: %d of %d are the direct computation's",
              same, n);
    free(lg);
    g4_text_state_free(s);
    g4_gen_result_free(&a);
    g4_gen_result_free(&b);
    g4_gen_result_free(&c);
}

static void test_soft_chunks(model *tiny) {
    const g4_text_config *cfg = tiny->m->cfg;
    const int I = cfg->image_token_id, A = cfg->audio_token_id, H = cfg->hidden;
    int prompt[] = {2, 10, I, I, I, I, I, 20, A, A, A, 30, 40};
    const int n = (int)(sizeof prompt / sizeof prompt[0]), n_soft = 8;
    float *rows = g4_malloc(sizeof(float) * (size_t)n_soft * H);
    unsigned long long st = 42;
    for (int i = 0; i < n_soft * H; i++) rows[i] = g4t_rand_uniform(&st, -2.0f, 2.0f);
    g4_soft_tokens soft; // the state's soft rows, written as a tower would (on the backend)
    CHECK(g4_text_state_soft_rows(tiny->s, n_soft, &soft) == G4_OK);
    memcpy(soft.rows.data, rows, sizeof(float) * (size_t)n_soft * H);
    g4_gen_result ref = {0};
    const int chunks[3] = {0, 3, 1};
    for (int k = 0; k < 3; k++) {
        g4_gen_params p;
        g4_gen_params_default(&p);
        p.max_new = 12;
        p.prefill_chunk = chunks[k];
        g4_gen_result r;
        CHECK_MSG(g4_generate(tiny->s, NULL, prompt, n, &soft, &p, &r) == G4_OK, "%s", g4_error());
        if (k == 0)
            ref = r;
        else {
            CHECK_MSG(cf_first_diff(r.tokens.v, (int)r.tokens.n, ref.tokens.v, (int)ref.tokens.n) <
                          0,
                      "soft tokens, chunk %d: tokens differ from one-chunk prefill", chunks[k]);
            g4_gen_result_free(&r);
        }
    }
    // the soft rows matter: other rows give other logits (and here other tokens)
    for (int i = 0; i < n_soft * H; i++) ((float *)soft.rows.data)[i] = -rows[i];
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.max_new = 12;
    g4_gen_result r;
    CHECK(g4_generate(tiny->s, NULL, prompt, n, &soft, &p, &r) == G4_OK);
    CHECK(cf_first_diff(r.tokens.v, (int)r.tokens.n, ref.tokens.v, (int)ref.tokens.n) >= 0);
    g4_gen_result_free(&r);
    soft.n = 7;
    CHECK(g4_generate(tiny->s, NULL, prompt, n, &soft, &p, &r) == G4_EUSER);
    soft.n = 9;
    CHECK(g4_generate(tiny->s, NULL, prompt, n, &soft, &p, &r) == G4_EUSER);
    CHECK(g4_generate(tiny->s, NULL, prompt, n, NULL, &p, &r) == G4_EUSER);
    g4_gen_result_free(&ref);
    free(rows);
}

static void test_context(model *tiny2) {
    const int ctx = tiny2->m->cfg->context_length; // 128: tiny2's RoPE tables
    CHECK_INT(ctx, 128);
    int *ids = g4_malloc(sizeof(int) * (size_t)(ctx + 1));
    for (int i = 0; i <= ctx; i++) ids[i] = 3 + (i * 37) % 250;
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.max_new = 20;
    g4_gen_result r;
    CHECK(g4_generate(tiny2->s, NULL, ids, ctx + 1, NULL, &p, &r) == G4_EUSER);
    CHECK(strstr(g4_error(), "longer than the model's context") != NULL);
    CHECK(g4_generate(tiny2->s, NULL, ids, ctx - 8, NULL, &p, &r) == G4_OK);
    // 120 prompt rows + 8 fed-back tokens fill the 128 rows; the 9th token needs no row
    CHECK_INT(r.tokens.n, 9);
    CHECK_INT(r.max_new, 9);
    CHECK_INT(r.stop, G4_STOP_CONTEXT);
    g4_gen_result_free(&r);
    CHECK(g4_generate(tiny2->s, NULL, ids, ctx, NULL, &p, &r) == G4_OK);
    CHECK_INT(r.tokens.n, 1);
    g4_gen_result_free(&r);
    free(ids);
}

// --- 6. model vs state -------------------------------------------------------------------------
static void test_two_states(model *tiny) {
    const int pa[5] = {2, 11, 12, 13, 14}, pb[9] = {2, 300, 301, 302, 303, 304, 305, 306, 307};
    const int N = 20;
    g4_text_state *a, *b;
    CHECK(g4_text_state_new(tiny->m, 64, 16, &a) == G4_OK);
    CHECK(g4_text_state_new(tiny->m, 64, 16, &b) == G4_OK);
    const g4_sampler greedy = {0, 0, 1}, hot = {1.0f, 30, 0.9f};
    g4_text_state_set_sampler(a, &greedy, 0);
    g4_text_state_set_sampler(b, &hot, 42);
    int alone_a[20], alone_b[20], inter_a[20] = {0}, inter_b[20] = {0};
    CHECK(sc_steps(a, pa, 5, N, alone_a) == G4_OK);
    CHECK(sc_steps(b, pb, 9, N, alone_b) == G4_OK);
    // the same, both alive, their steps interleaved
    CHECK(sc_interleaved(a, pa, 5, b, pb, 9, N, inter_a, inter_b) == G4_OK);
    CHECK_MSG(!memcmp(alone_a, inter_a, sizeof alone_a) && !memcmp(alone_b, inter_b, sizeof alone_b),
              "two states interleaved: tokens differ from one at a time");
    g4_text_state_free(a);
    g4_text_state_free(b);
    printf("two states on one model, interleaved: %d + %d tokens as alone\n", N, N);
}

// No backend allocation after a state's first request, whatever the later requests' lengths
// and samplers (while they fit it); a larger request grows it (the documented exception).
static void test_no_alloc(model *tiny) {
    g4_backend *be = tiny->m->be;
    CHECK(be->alloc_count != NULL);
    const g4_text_state_opts o = {96, 16, 1, 0};
    g4_text_state *s;
    CHECK(g4_text_state_new_opts(tiny->m, &o, &s) == G4_OK);
    int prompt[80];
    for (int i = 0; i < 80; i++) prompt[i] = 3 + (i * 29) % 1000;
    prompt[0] = 2;
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.ignore_eos = 1;
    p.max_new = 30;
    g4_gen_result r;
    CHECK(g4_generate(s, NULL, prompt, 40, NULL, &p, &r) == G4_OK); // the first request
    g4_gen_result_free(&r);
    const uint64_t before = be->alloc_count(be);
    const int lens[4] = {5, 66, 17, 1}, news[4] = {12, 30, 70, 3};
    for (int i = 0; i < 4; i++) {
        p.max_new = news[i];
        p.sampler = i % 2 ? (g4_sampler){0.9f, 20, 0.8f} : (g4_sampler){0, 0, 1};
        p.seed = (uint64_t)i;
        p.prefill_chunk = i == 2 ? 3 : 0;
        CHECK_MSG(g4_generate(s, NULL, prompt, lens[i], NULL, &p, &r) == G4_OK, "%s", g4_error());
        CHECK_INT(r.tokens.n, news[i]);
        g4_gen_result_free(&r);
    }
    const uint64_t after = be->alloc_count(be);
    CHECK_MSG(after == before, "%llu backend allocations in 4 requests after the first",
              (unsigned long long)(after - before));
    p.max_new = 40; // 80 + 40 rows > 96: the state grows
    CHECK(g4_generate(s, NULL, prompt, 80, NULL, &p, &r) == G4_OK);
    CHECK(s->capacity >= 120 && be->alloc_count(be) > after);
    g4_gen_result_free(&r);
    g4_text_state_free(s);
    printf("no allocation after the first request: %llu allocations in 4 requests\n",
           (unsigned long long)(after - before));
}

static void test_bad_params(model *tiny, const g4_tokenizer *tok) {
    int prompt[3] = {2, 5, 6};
    g4_gen_params p;
    g4_gen_result r;
    g4_gen_params_default(&p);
    p.max_new = 0;
    CHECK(g4_generate(tiny->s, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    g4_gen_params_default(&p);
    CHECK(g4_generate(tiny->s, tok, prompt, 0, NULL, &p, &r) == G4_EUSER);
    const char *empty = "";
    p.stop = &empty, p.n_stop = 1;
    CHECK(g4_generate(tiny->s, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    const char *ok = "x";
    p.stop = &ok;
    CHECK(g4_generate(tiny->s, NULL, prompt, 3, NULL, &p, &r) == G4_EUSER); // needs a tokenizer
    g4_gen_params_default(&p);
    p.sampler = (g4_sampler){1.0f, -1, 1};
    CHECK(g4_generate(tiny->s, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    p.sampler = (g4_sampler){1.0f, 0, 0};
    CHECK(g4_generate(tiny->s, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    int bad[2] = {2, 5000}; // outside the 1024-token vocabulary
    g4_gen_params_default(&p);
    CHECK(g4_generate(tiny->s, tok, bad, 2, NULL, &p, &r) == G4_EUSER);
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    char *path = g4_sprintf("%s/chat/generate_cases.jsonl", dir);
    char *sample_path = g4_sprintf("%s/chat/sample_cases.jsonl", dir);
    cf_lines ls = cf_read(sample_path);
    char *tok_path = g4_sprintf("%s/chat/chat_bpe.json", dir);
    char *tiny2_dir = g4_sprintf("%s/tiny2/package", dir);
    cf_lines l = cf_read(path);
    g4_tokenizer *tok;
    if (g4_tokenizer_open(tok_path, &tok)) {
        fprintf(stderr, "%s\n", g4_error());
        return 1;
    }
    model tiny = open_model(g4t_env("G4_TINY_PKG")), tiny2 = open_model(tiny2_dir);
    test_splitmix(&ls);
    test_warp_cases(&ls);
    test_sampler();
    test_sample_op();
    test_scatter_op();
    test_hf_greedy(&l, &tiny, &tiny2, tok);
    test_stops(&l, &tiny, tok);
    test_text_stream(tok);
    test_sampling_seed(&tiny);
    test_soft_chunks(&tiny);
    test_context(&tiny2);
    test_two_states(&tiny);
    test_no_alloc(&tiny);
    test_bad_params(&tiny, tok);
    close_model(&tiny);
    close_model(&tiny2);
    g4_tokenizer_close(tok);
    cf_free(&l);
    cf_free(&ls);
    free(sample_path);
    free(path);
    free(tok_path);
    free(tiny2_dir);
    return g4t_finish("test_generate");
}
