// test_generate.c: generation (engine/generate.c, engine/sample.c) on the CPU backend.
//
//  1. the PRNG: xoshiro256** seeded by SplitMix64 equals the fixture's values (computed in
//     tools/python/make_generate_fixture.py from the published algorithms);
//  2. the sampler on hand-made logits: greedy = first maximum; NaN is an internal error;
//     top-k / top-p / temperature keep exactly the tokens HF's warpers keep, and the sampled
//     frequencies match the renormalised probabilities (20000 draws: a 5-sigma bound, sigma
//     = sqrt(p (1 - p) / n) <= 0.0036, so a correct sampler fails with probability < 1e-6);
//  3. greedy generation on both tiny packages equals HF's greedy `generate` (the fixture's
//     ids; exact: ids are discrete, and the fixture records the smallest top-2 logit gap HF
//     saw, >= 4e-4, far above our ~1e-6 relative logit error), with the prefill in one chunk,
//     in chunks of 7 and token by token;
//  4. stop strings (the fixture's, cut where Python's str.find cuts, after as many tokens as
//     an engine checking after every token needs), --ignore-stop, "\n\n", max_new, extra EOS
//     ids, the context limit (tiny2's 128 positions), streaming (the pieces are valid UTF-8
//     and add up to the text, with and without a stop string);
//  5. sampling is reproducible with a seed and changes with it; soft tokens reach the right
//     placeholders whatever the chunking (same tokens for chunks of 1, 3 and all);
//  6. bad parameters are user errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "eval/pystr.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

// --- 1. PRNG ----------------------------------------------------------------------------------
static void test_rng(const cf_lines *l) {
    int n = 0;
    for (int c = 0; c < l->n; c++) {
        const cJSON *o = l->line[c];
        if (strcmp(cf_str(o, "kind"), "rng")) continue;
        g4_rng r;
        uint64_t seed = (uint64_t)cJSON_GetObjectItem(o, "seed")->valuedouble;
        g4_rng_seed(&r, seed);
        const cJSON *want = cJSON_GetObjectItem(o, "u64");
        for (int i = 0; i < cJSON_GetArraySize(want); i++) {
            uint64_t w = strtoull(cJSON_GetArrayItem(want, i)->valuestring, NULL, 10);
            uint64_t g = g4_rng_next(&r);
            CHECK_MSG(g == w, "seed %llu output %d: %llu, expected %llu", (unsigned long long)seed,
                      i, (unsigned long long)g, (unsigned long long)w);
        }
        n++;
    }
    CHECK(n >= 3);
    g4_rng r;
    g4_rng_seed(&r, 5);
    for (int i = 0; i < 1000; i++) {
        double u = g4_rng_uniform(&r);
        CHECK(u >= 0 && u < 1);
    }
}

// --- 2. sampler ---------------------------------------------------------------------------------
// Draws n tokens and returns the frequency of each of V tokens.
static void freqs(const g4_sampler *s, const float *logits, int V, int n, double *f) {
    g4_rng r;
    g4_rng_seed(&r, 12345);
    memset(f, 0, sizeof(double) * (size_t)V);
    for (int i = 0; i < n; i++) {
        int t = -1;
        CHECK(g4_sample(s, logits, V, &r, &t) == G4_OK);
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

static void test_sampler(void) {
    g4_rng r;
    g4_rng_seed(&r, 1);
    int t;
    const float tie[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    g4_sampler greedy = {0, 0, 1};
    CHECK(g4_sample(&greedy, tie, 5, &r, &t) == G4_OK && t == 1); // first of two maxima
    float nan_l[3] = {0.1f, NAN, 0.3f};
    CHECK(g4_sample(&greedy, nan_l, 3, &r, &t) == G4_EINTERNAL);
    g4_sampler hot = {1.0f, 0, 1};
    CHECK(g4_sample(&hot, nan_l, 3, &r, &t) == G4_EINTERNAL);
    const float neg_inf[3] = {-INFINITY, 0.0f, -INFINITY};
    for (int i = 0; i < 50; i++) CHECK(g4_sample(&hot, neg_inf, 3, &r, &t) == G4_OK && t == 1);

    // p = (0.5, 0.3, 0.2) as logits ln p (plus a constant: softmax ignores it)
    const float l3[4] = {logf(0.5f) + 3, logf(0.3f) + 3, logf(0.2f) + 3, -INFINITY};
    const int N = 20000;
    double f[4];
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
    // top_p 0.5: token 2 has exactly 0.5 above it: dropped (HF removes cumsum <= 1 - top_p)
    g4_sampler p5 = {1.0f, 0, 0.45f};
    freqs(&p5, l3, 4, 500, f);
    CHECK(fabs(f[0] - 1.0) < 1e-9); // (a sum of n terms 1/n)
    // temperature 2: p ~ sqrt(p)
    double s = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    g4_sampler t2 = {2.0f, 0, 1};
    freqs(&t2, l3, 4, N, f);
    check_freqs("T=2", f, (double[]){sqrt(0.5) / s, sqrt(0.3) / s, sqrt(0.2) / s, 0}, 4, N);
    // top-k over a larger vocabulary (the heap path): only the 3 largest ever appear
    float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (float)((i * 7919) % 1000) * 1e-3f;
    g4_sampler k3 = {1.0f, 3, 1};
    g4_rng_seed(&r, 3);
    for (int i = 0; i < 300; i++) {
        CHECK(g4_sample(&k3, big, 1000, &r, &t) == G4_OK);
        CHECK(big[t] >= 0.997f);
    }
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
} model;

static model open_model(const char *dir) {
    model md = {0};
    if (g4_package_open(dir, &md.pkg) || g4_text_model_load(md.pkg, g4_backend_cpu(), &md.m)) {
        fprintf(stderr, "%s\n", g4_error());
        exit(1);
    }
    return md;
}

static void close_model(model *md) {
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
        for (int k = 0; k < 3; k++) {
            g4_gen_params p;
            g4_gen_params_default(&p);
            p.max_new = cf_int(o, "max_new");
            p.eos = eos, p.n_eos = n_eos;
            p.prefill_chunk = chunks[k];
            g4_gen_result r;
            int rc = g4_generate(md->m, is_chat ? tok : NULL, prompt, n_prompt, NULL, &p, &r);
            CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
            char what[96];
            snprintf(what, sizeof what, "%s/%s chunk %d", cf_str(o, "package"), name, chunks[k]);
            expect_tokens(what, &r, want, n_want);
            int ended_eos = n_want < p.max_new;
            CHECK_INT(r.stop, ended_eos ? G4_STOP_EOS : G4_STOP_MAX_NEW);
            CHECK(r.n_prompt == n_prompt && r.max_new == p.max_new);
            CHECK(r.prefill_ms >= 0 && r.decode_ms >= 0 && r.decode_tok_s >= 0);
            if (is_chat) CHECK_MSG(r.text && !strcmp(r.text, cf_str(o, "text")), "%s: text", what);
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
            CHECK_MSG(g4_generate(tiny->m, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK, "%s",
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
    CHECK(g4_generate(tiny->m, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    expect_tokens("max_new 5", &r, want, 5);
    CHECK_INT(r.stop, G4_STOP_MAX_NEW);
    g4_gen_result_free(&r);
    int k = 6;
    for (int i = 0; i < k; i++)
        if (want[i] == want[k]) k = i; // the first occurrence of that id
    int extra[4] = {eos[0], n_eos > 1 ? eos[1] : eos[0], want[k], 999999};
    p.eos = extra, p.n_eos = 4;
    p.max_new = 40;
    CHECK(g4_generate(tiny->m, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
    expect_tokens("extra eos", &r, want, k + 1);
    CHECK_INT(r.stop, G4_STOP_EOS);
    CHECK_INT(r.stop_id, want[k]);
    g4_gen_result_free(&r);

    // streaming without stop strings: pieces add up to the text (random tiny-model text has
    // many byte-fallback pieces, so this exercises holding back unfinished byte runs)
    sink sk = {0};
    g4_gen_params_default(&p);
    p.max_new = 60;
    p.on_text = collect, p.on_text_ctx = &sk;
    p.sampler = (g4_sampler){1.0f, 0, 1};
    p.seed = 99;
    CHECK(g4_generate(tiny->m, tok, prompt, n_prompt, NULL, &p, &r) == G4_OK);
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
    p.sampler = (g4_sampler){0.8f, 40, 0.9f};
    p.seed = 7;
    CHECK(g4_generate(tiny->m, NULL, prompt, 6, NULL, &p, &a) == G4_OK);
    CHECK(g4_generate(tiny->m, NULL, prompt, 6, NULL, &p, &b) == G4_OK);
    p.seed = 8;
    CHECK(g4_generate(tiny->m, NULL, prompt, 6, NULL, &p, &c) == G4_OK);
    CHECK(cf_first_diff(a.tokens.v, (int)a.tokens.n, b.tokens.v, (int)b.tokens.n) < 0);
    CHECK(cf_first_diff(a.tokens.v, (int)a.tokens.n, c.tokens.v, (int)c.tokens.n) >= 0);
    CHECK(a.text == NULL);
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
    g4_soft_tokens soft = {rows, n_soft};
    g4_gen_result ref = {0};
    const int chunks[3] = {0, 3, 1};
    for (int k = 0; k < 3; k++) {
        g4_gen_params p;
        g4_gen_params_default(&p);
        p.max_new = 12;
        p.prefill_chunk = chunks[k];
        g4_gen_result r;
        CHECK_MSG(g4_generate(tiny->m, NULL, prompt, n, &soft, &p, &r) == G4_OK, "%s", g4_error());
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
    for (int i = 0; i < n_soft * H; i++) rows[i] = -rows[i];
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.max_new = 12;
    g4_gen_result r;
    CHECK(g4_generate(tiny->m, NULL, prompt, n, &soft, &p, &r) == G4_OK);
    CHECK(cf_first_diff(r.tokens.v, (int)r.tokens.n, ref.tokens.v, (int)ref.tokens.n) >= 0);
    g4_gen_result_free(&r);
    soft.n = 7;
    CHECK(g4_generate(tiny->m, NULL, prompt, n, &soft, &p, &r) == G4_EUSER);
    soft.n = 9;
    CHECK(g4_generate(tiny->m, NULL, prompt, n, &soft, &p, &r) == G4_EUSER);
    CHECK(g4_generate(tiny->m, NULL, prompt, n, NULL, &p, &r) == G4_EUSER);
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
    CHECK(g4_generate(tiny2->m, NULL, ids, ctx + 1, NULL, &p, &r) == G4_EUSER);
    CHECK(strstr(g4_error(), "longer than the model's context") != NULL);
    CHECK(g4_generate(tiny2->m, NULL, ids, ctx - 8, NULL, &p, &r) == G4_OK);
    // 120 prompt rows + 8 fed-back tokens fill the 128 rows; the 9th token needs no row
    CHECK_INT(r.tokens.n, 9);
    CHECK_INT(r.max_new, 9);
    CHECK_INT(r.stop, G4_STOP_CONTEXT);
    g4_gen_result_free(&r);
    CHECK(g4_generate(tiny2->m, NULL, ids, ctx, NULL, &p, &r) == G4_OK);
    CHECK_INT(r.tokens.n, 1);
    g4_gen_result_free(&r);
    free(ids);
}

static void test_bad_params(model *tiny, const g4_tokenizer *tok) {
    int prompt[3] = {2, 5, 6};
    g4_gen_params p;
    g4_gen_result r;
    g4_gen_params_default(&p);
    p.max_new = 0;
    CHECK(g4_generate(tiny->m, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    g4_gen_params_default(&p);
    CHECK(g4_generate(tiny->m, tok, prompt, 0, NULL, &p, &r) == G4_EUSER);
    const char *empty = "";
    p.stop = &empty, p.n_stop = 1;
    CHECK(g4_generate(tiny->m, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    const char *ok = "x";
    p.stop = &ok;
    CHECK(g4_generate(tiny->m, NULL, prompt, 3, NULL, &p, &r) == G4_EUSER); // needs a tokenizer
    g4_gen_params_default(&p);
    p.sampler = (g4_sampler){1.0f, -1, 1};
    CHECK(g4_generate(tiny->m, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    p.sampler = (g4_sampler){1.0f, 0, 0};
    CHECK(g4_generate(tiny->m, tok, prompt, 3, NULL, &p, &r) == G4_EUSER);
    int bad[2] = {2, 5000}; // outside the 1024-token vocabulary
    g4_gen_params_default(&p);
    CHECK(g4_generate(tiny->m, tok, bad, 2, NULL, &p, &r) == G4_EUSER);
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    char *path = g4_sprintf("%s/chat/generate_cases.jsonl", dir);
    char *tok_path = g4_sprintf("%s/chat/chat_bpe.json", dir);
    char *tiny2_dir = g4_sprintf("%s/tiny2/package", dir);
    cf_lines l = cf_read(path);
    g4_tokenizer *tok;
    if (g4_tokenizer_open(tok_path, &tok)) {
        fprintf(stderr, "%s\n", g4_error());
        return 1;
    }
    model tiny = open_model(g4t_env("G4_TINY_PKG")), tiny2 = open_model(tiny2_dir);
    test_rng(&l);
    test_sampler();
    test_hf_greedy(&l, &tiny, &tiny2, tok);
    test_stops(&l, &tiny, tok);
    test_text_stream(tok);
    test_sampling_seed(&tiny);
    test_soft_chunks(&tiny);
    test_context(&tiny2);
    test_bad_params(&tiny, tok);
    close_model(&tiny);
    close_model(&tiny2);
    g4_tokenizer_close(tok);
    cf_free(&l);
    free(path);
    free(tok_path);
    free(tiny2_dir);
    return g4t_finish("test_generate");
}
