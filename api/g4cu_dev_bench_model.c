// g4cu_dev_bench_model.c: `g4cu bench PKG` (include/g4cu_dev.h g4cu_dev_bench_model): the whole
// text model on a backend: prefill tok/s at 128, 512, 2048 and (CUDA, when the context allows)
// 16,000 tokens; decode through the user path, g4_generate (the call `g4cu generate` makes: the
// prefill's last row and every new token from the one decode step, graph-replayed on CUDA, with the
// sample op on the device), timed by the generation result itself: greedy, 128 new tokens after a
// 128-token prompt (--ignore-eos: random weights end early otherwise), the same sampled
// (temperature 1, top-k 64, top-p 0.95), and greedy after 4096- and 32768-token prompts; time to
// first token, GPU memory, the greedy decode again with the per-layer embedding table in pinned
// host memory (a second load with that load option), vision/audio tower ms, and the same for a
// second package (Q4); optionally HF transformers on the same weights (tools/python/bench_hf.py)
// with the ratios. Packages are keyed "f16" / "q4" by their decoder's weights (a repeated kind gets
// "_2", "_3").
//
// Timing: median of `reps` runs after one warm-up run (3 at most for the 4k / 16k / 32k prompts);
// each generation starts from an empty KV cache on one state that every run reuses. Token ids
// are seeded random (never one repeated id, never bos/eos/pad nor a media placeholder).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <g4cu_dev.h>

#include "loader/json.h"

#include "api/api_internal.h"
#include "api/g4cu_dev_bench_peer.h"
#include "engine/generate.h"
#include "engine/multimodal.h"
#include "engine/text_model.h"
#include "kernels/backend_select.h"
#include "kernels/cuda_util.h"

// `human` below: where the human-readable lines go (the caller's out: stdout, or stderr when
// -o puts a table on stdout).

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define G4_BENCH_MAX_ROWS 24
typedef struct {
    char test[32];    // llama-bench's names: pp128 (prefill), tg128 (decode), ttft pp128, ...
    const char *unit; // "tok/s" or "ms"
    int n;            // repetitions
    double mean, sd;
} bench_row;

// decode after a 4096-, a 16384- and a 32768-token prompt (16k: the peers stage's row)
enum { N_LONG = 3 };
static const int long_prompt[N_LONG] = {4096, 16384, 32768};

typedef struct {
    const char *kind; // "f16" / "q4": the decoder's weights
    char name[32];    // kind, + "_<i>" for a repeated kind
    const char *dir;
    int ple_host;         // the run's load option (--ple-host)
    double prefill_ms[3]; // 128, 512, 2048 tokens
    int prefill_len[3];
    double ttft_ms;              // 128-token prompt -> first token id on the host (g4_generate)
    double decode_tok_s;         // greedy, 128 new tokens after the prompt (g4_generate)
    double decode_sampled_tok_s; // the same, temperature 1, top-k 64, top-p 0.95
    double ttft_long_ms[N_LONG], decode_long_tok_s[N_LONG]; // after 4k / 16k / 32k prompts
                                                            // (-1: the context is shorter)
    double ttft_host_ms, decode_host_tok_s; // greedy with the PLE table in pinned host memory
    double ple_gib;         // the PLE table's bytes (off the device in the host variant)
    double vision_ms;       // vision tower (patch embedding .. projection) for one 768x768 image
    double audio_ms;        // audio tower for a 30 s clip (750 soft tokens)
    double prefill_long_ms; // one G4_BENCH_LONG_PREFILL-token prefill (issue 22); -1 when skipped
    double vqa_ttft_ms, asr_ttft_ms; // media request TTFT (bench_media_ttft); -1 when skipped
    double load_s;
    double weights_gib;                // weight bytes placed on the backend
    double state_gib;                  // KV cache of a 128 + 128-token context
    bench_row rows[G4_BENCH_MAX_ROWS]; // every measurement's mean and sd, for -o md|csv|json
    int n_rows;
    FILE *progress;     // each row as it is measured (NULL: none)
    const char *filter; // only the rows whose test name contains it (NULL: all)
} bench_result;

// --filter S: whether the row named by fmt is wanted. A measurement runs when one of the rows
// it makes is wanted (the generation makes "tg128 @ pp128" and "ttft pp128"); add_row keeps only
// the wanted rows.
static int wanted(const bench_result *r, const char *fmt, ...) G4_PRINTF(2, 3);
static int wanted(const bench_result *r, const char *fmt, ...) {
    if (!r->filter) return 1;
    char test[sizeof r->rows[0].test];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(test, sizeof test, fmt, ap);
    va_end(ap);
    return strstr(test, r->filter) != NULL;
}

// Records a measurement's repetitions v[n] (in `unit`) as a row: mean and sample standard
// deviation (n - 1; 0 for one repetition), as llama-bench reports them.
static void add_row(bench_result *r, const char *unit, const double *v, int n, const char *fmt, ...)
    G4_PRINTF(5, 6);
static void add_row(bench_result *r, const char *unit, const double *v, int n, const char *fmt,
                    ...) {
    G4_ASSERT(r->n_rows < G4_BENCH_MAX_ROWS && n > 0);
    double sum = 0, ss = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    const double mean = sum / n;
    for (int i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    bench_row *row = &r->rows[r->n_rows];
    *row = (bench_row){.unit = unit, .n = n, .mean = mean, .sd = n > 1 ? sqrt(ss / (n - 1)) : 0};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row->test, sizeof row->test, fmt, ap);
    va_end(ap);
    if (r->filter && !strstr(row->test, r->filter)) return;
    r->n_rows++;
    if (r->progress) { // (a CPU run takes minutes: what is done so far, as it is done)
        fprintf(r->progress, "bench: %s %s: %.3f +/- %.3f %s (%d reps)\n", r->name, row->test,
                row->mean, row->sd, unit, n);
        fflush(r->progress);
    }
}

// G4_PROFILE=1 on a device backend: the per-op split (kernels/profile.cu) after the timed runs.
static int profiling(const g4_backend *be) {
    return getenv("G4_PROFILE") && strcmp(getenv("G4_PROFILE"), "0") && !be->host_memory;
}

static void bench_ids(const g4_package *p, int32_t *ids, int n, unsigned long long seed);

// What a media request runs before its prefill: the front end on the synthetic media and the
// tower into the state's soft rows.
typedef struct {
    const g4_package *p;
    g4_mm_towers *towers;
    const g4_image *img; // vision, or
    g4_logmel *lm;       // audio: wave[0 .. n) through lm
    const float *wave;
    int64_t n;
} media_req;

static int media_soft(const media_req *q, g4_text_state *s, g4_soft_tokens *soft) {
    int rc;
    if (q->img) {
        g4_image_features f;
        if ((rc = g4_image_features_from_rgb(&q->p->image_proc, q->img, &f))) return rc;
        if (!(rc = g4_text_state_soft_rows(s, f.n_soft_tokens, soft)))
            rc = g4_mm_image_tower_run(q->towers, NULL, &f, &soft->rows);
        g4_image_features_free(&f);
        return rc;
    }
    g4_audio_features f;
    if ((rc = g4_logmel_compute(q->lm, q->wave, q->n, "bench audio", &f))) return rc;
    if (!(rc = g4_text_state_soft_rows(s, f.n_soft_tokens, soft)))
        rc = g4_mm_audio_tower_run(q->towers, NULL, &f, &soft->rows);
    g4_audio_features_free(&f);
    return rc;
}

// A media request's time to first token (issue 22's VQA / ASR row): front end, tower, the
// prefill of 16 text ids + n_soft placeholders (image or audio id) + 16 text ids, and the first
// token (g4_text_step), median of reps after a warm-up. Device backends only (-1 on the CPU,
// whose towers take seconds). m NULL: skipped.
static int bench_media_ttft(g4_text_model *m, const media_req *q, int n_soft, int reps,
                            bench_result *r, const char *row, double *ms) {
    *ms = -1;
    const g4_text_config *c = &q->p->text;
    const int n = 32 + n_soft, ph = q->img ? c->image_token_id : c->audio_token_id;
    if (!m || m->be->host_memory || ph < 0 || n + 1 > c->context_length) return G4_OK;
    int32_t *ids = g4_malloc(sizeof(int32_t) * (size_t)n);
    bench_ids(q->p, ids, 16, 0x7e57);
    for (int i = 0; i < n_soft; i++) ids[16 + i] = ph;
    bench_ids(q->p, ids + 16 + n_soft, 16, 0x7e58);
    double *t = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    g4_text_state *s = NULL;
    const g4_text_state_opts so = {n + 1, n, 1, 1};
    int rc = g4_text_state_new_opts(m, &so, &s);
    for (int i = 0; i <= reps && !rc; i++) {
        g4_text_state_reset(s);
        const double a = now_ms();
        g4_soft_tokens soft;
        int32_t next;
        if ((rc = media_soft(q, s, &soft)) || (rc = g4_text_step(s, ids, n, &soft, &next))) break;
        if (i) t[i - 1] = now_ms() - a; // run 0 warms up
    }
    if (!rc) {
        add_row(r, "ms", t, reps, "%s", row);
        *ms = median(t, reps);
    }
    g4_text_state_free(s);
    free(t);
    free(ids);
    return rc;
}

// Vision tower on one 768x768 image and audio tower on a 30 s clip (synthetic media through
// the real front ends; tower time only, median of reps after a warm-up); -1 when the package
// lacks the tower. Then, with the text model m on a device backend, the VQA and ASR requests'
// time to first token on the same media (bench_media_ttft).
static int bench_towers(FILE *human, const g4_package *p, g4_backend *be, g4_text_model *m,
                        int reps, bench_result *r) {
    r->vision_ms = r->audio_ms = r->vqa_ttft_ms = r->asr_ttft_ms = -1;
    g4_mm_towers towers;
    g4_mm_towers_init(&towers, p, be);
    double *t = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    int rc = G4_OK;
    if (g4_package_component(p, G4_COMP_VISION) && p->has_image_proc &&
        (wanted(r, "vision 768x768") || (!be->host_memory && wanted(r, "VQA TTFT 768x768")))) {
        g4_image img = {g4_malloc(768 * 768 * 3), 768, 768};
        for (int i = 0; i < 768 * 768 * 3; i++) img.rgb[i] = (uint8_t)((i * 2654435761u) >> 24);
        g4_image_features f;
        rc = g4_image_features_from_rgb(&p->image_proc, &img, &f);
        if (rc) {
            free(img.rgb);
            goto done;
        }
        g4_buf rows = g4_buf_new(be, G4_F32, f.n_soft_tokens, p->text.hidden);
        for (int i = 0; i <= reps && !rc; i++) {
            double a = now_ms();
            rc = g4_mm_image_tower_run(&towers, NULL, &f, &rows); // (complete when it returns)
            if (i) t[i - 1] = now_ms() - a;
        }
        if (!rc && profiling(be)) { // one more run, split by op
            g4_cuda_profile_reset();
            if (!(rc = g4_mm_image_tower_run(&towers, NULL, &f, &rows))) {
                fprintf(human, "vision tower, one 768x768 image, per op (eager):\n");
                g4_cuda_profile_report(human, 1);
            }
        }
        if (!rc) add_row(r, "ms", t, reps, "vision 768x768");
        if (!rc) r->vision_ms = median(t, reps);
        const media_req q = {p, &towers, &img, NULL, NULL, 0};
        if (!rc)
            rc = bench_media_ttft(m, &q, f.n_soft_tokens, reps, r, "VQA TTFT 768x768",
                                  &r->vqa_ttft_ms);
        free(img.rgb);
        g4_buf_free(be, &rows);
        g4_image_features_free(&f);
        if (rc) goto done;
    }
    if (g4_package_component(p, G4_COMP_AUDIO) && p->has_audio_fe &&
        (wanted(r, "audio 30 s") || (!be->host_memory && wanted(r, "ASR TTFT 30 s")))) {
        const int64_t n = 30 * (int64_t)p->audio_fe.sampling_rate;
        float *wave = g4_malloc(sizeof(float) * (size_t)n);
        unsigned long long s = 0x5eed;
        for (int64_t i = 0; i < n; i++) { // speech-like: noise under a slow envelope
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            wave[i] = 0.3f * sinf(6.283f * 3.0f * (float)i / (float)p->audio_fe.sampling_rate) *
                      ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
        }
        g4_logmel lm;
        g4_audio_features f;
        if ((rc = g4_logmel_init(&p->audio_fe, &lm))) {
            free(wave);
            goto done;
        }
        rc = g4_logmel_compute(&lm, wave, n, "bench audio", &f);
        if (rc) {
            g4_logmel_free(&lm);
            free(wave);
            goto done;
        }
        g4_buf rows = g4_buf_new(be, G4_F32, f.n_soft_tokens, p->text.hidden);
        for (int i = 0; i <= reps && !rc; i++) {
            double a = now_ms();
            rc = g4_mm_audio_tower_run(&towers, NULL, &f, &rows);
            if (i) t[i - 1] = now_ms() - a;
        }
        if (!rc && profiling(be)) {
            g4_cuda_profile_reset();
            if (!(rc = g4_mm_audio_tower_run(&towers, NULL, &f, &rows))) {
                fprintf(human, "audio tower, 30 s, per op (eager):\n");
                g4_cuda_profile_report(human, 1);
            }
        }
        if (!rc) add_row(r, "ms", t, reps, "audio 30 s");
        if (!rc) r->audio_ms = median(t, reps);
        const media_req q = {p, &towers, NULL, &lm, wave, n};
        if (!rc)
            rc =
                bench_media_ttft(m, &q, f.n_soft_tokens, reps, r, "ASR TTFT 30 s", &r->asr_ttft_ms);
        g4_logmel_free(&lm);
        free(wave);
        g4_buf_free(be, &rows);
        g4_audio_features_free(&f);
    }
done:
    free(t);
    g4_mm_towers_free(&towers);
    return rc;
}

// Generations of N new tokens (EOS ignored) after ids[0..P) on state s with the sampler: the
// generation results' own TTFT (prefill_ms) and decode rate, medians of reps runs after a
// warm-up.
static int bench_generate(g4_text_state *s, const int32_t *ids, int P, int N, const g4_sampler *smp,
                          int reps, double *ttft_ms, double *tok_s, bench_result *res,
                          const char *variant) {
    double *ttft = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    double *rate = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    g4_gen_params p;
    g4_gen_params_default(&p);
    p.max_new = N;
    p.ignore_eos = 1;
    p.sampler = *smp;
    p.seed = 0x5eed;
    int rc = G4_OK;
    for (int i = 0; i <= reps && !rc; i++) {
        g4_gen_result r;
        if ((rc = g4_generate(s, NULL, ids, P, NULL, &p, &r))) break;
        if (i) { // run 0 warms up
            ttft[i - 1] = r.prefill_ms;
            rate[i - 1] = r.decode_tok_s;
        }
        g4_gen_result_free(&r);
    }
    if (!rc) {
        add_row(res, "tok/s", rate, reps, "tg%d @ pp%d%s", N, P, variant);
        add_row(res, "ms", ttft, reps, "ttft pp%d%s", P, variant);
        *ttft_ms = median(ttft, reps);
        *tok_s = median(rate, reps);
    }
    free(ttft);
    free(rate);
    return rc;
}

// KV-cache bytes of `rows` positions of the model on its backend.
static double kv_gib(const g4_text_model *m, int rows) {
    double b = 0;
    for (int l = 0; l < m->cfg->n_layers; l++)
        if (m->cfg->layer[l].kv_source == l)
            b += 2.0 * rows * m->cfg->n_kv_heads * m->cfg->layer[l].head_dim *
                 (double)g4_type_size(m->be->kv_type);
    return b / (1u << 30);
}

#define G4_BENCH_LONG_PREFILL 16000

// n seeded random prompt ids (xorshift from `seed`): never bos/eos/pad (0-2) and never a media
// placeholder (the image / audio token ids, which a prompt without media rows must not hold:
// the forward refuses them), redrawn from the same stream.
static void bench_ids(const g4_package *p, int32_t *ids, int n, unsigned long long seed) {
    for (int i = 0; i < n; i++) {
        do {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            ids[i] = 3 + (int32_t)(seed % (unsigned)(p->text.vocab - 3));
        } while (g4_placeholder_of(&p->text, ids[i]) != G4_PH_NONE);
    }
}

// The long-prompt row: median ms of one G4_BENCH_LONG_PREFILL-token prefill of ids (own state
// with one logit row, as the other prefill rows; reps runs after a warm-up); -1 when the
// context is shorter or the backend is the CPU one (a 16k-token CPU prefill takes hours).
static int bench_prefill_long(g4_text_model *m, const g4_package *p, const g4_backend *be,
                              const int32_t *ids, int reps, bench_result *r) {
    const int n = G4_BENCH_LONG_PREFILL;
    r->prefill_long_ms = -1;
    if (p->text.context_length < n || be->host_memory || !wanted(r, "pp%d", n)) return G4_OK;
    double *t = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    g4_text_state *s = NULL;
    const g4_text_state_opts so = {n, n, 1, 1};
    int rc = g4_text_state_new_opts(m, &so, &s);
    for (int i = 0; i <= reps && !rc; i++) {
        g4_text_state_reset(s);
        double a = now_ms();
        if ((rc = g4_text_forward(s, ids, n, NULL, NULL, 0))) break;
        if (i) t[i - 1] = now_ms() - a; // run 0 warms up
    }
    if (!rc) {
        double *tps = g4_malloc(sizeof(double) * (size_t)reps);
        for (int i = 0; i < reps; i++) tps[i] = n / (t[i] / 1e3);
        add_row(r, "tok/s", tps, reps, "pp%d", n);
        free(tps);
        r->prefill_long_ms = median(t, reps);
    }
    g4_text_state_free(s);
    free(t);
    return rc;
}

// Runs one package; fills r. Lengths beyond the context are skipped (-1).
static int bench_one(FILE *human, const char *dir, g4_backend *be, int ple_host, int reps,
                     const char *filter, FILE *progress, bench_result *r) {
    memset(r, 0, sizeof *r);
    r->progress = progress;
    r->filter = filter;
    r->dir = dir;
    r->ple_host = ple_host;
    r->prefill_long_ms = -1;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    int32_t *ids = NULL;
    double *t = NULL;
    int rc;
    double t0 = now_ms();
    const g4_text_load_opts lo = {.ple_host = ple_host};
    if ((rc = g4_package_open(dir, &p)) || (rc = g4_text_model_load_opts(p, be, &lo, &m)))
        goto done;
    be->sync(be);
    r->load_s = (now_ms() - t0) / 1e3;
    r->weights_gib = (double)m->weight_bytes / (1u << 30);
    r->kind = p->text.weights_q4 ? "q4" : "f16";
    snprintf(r->name, sizeof r->name, "%s", r->kind);
    if ((rc = bench_towers(human, p, be, m, reps, r))) goto done;
    const int lens[3] = {128, 512, 2048};
    const int ctx = p->text.context_length, max_ids = 32768 + 256;
    ids = g4_malloc(sizeof(int32_t) * (size_t)max_ids);
    bench_ids(p, ids, max_ids, 0x5eed);
    t = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    for (int k = 0; k < 3; k++) {
        r->prefill_len[k] = lens[k];
        r->prefill_ms[k] = -1;
        if (lens[k] > ctx || !wanted(r, "pp%d", lens[k])) continue;
        const g4_text_state_opts so = {lens[k], lens[k], 1, 1};
        if ((rc = g4_text_state_new_opts(m, &so, &s))) goto done;
        for (int i = 0; i <= reps; i++) {
            g4_text_state_reset(s);
            double a = now_ms();
            if ((rc = g4_text_forward(s, ids, lens[k], NULL, NULL, 0))) goto done;
            if (i) t[i - 1] = now_ms() - a; // run 0 warms up
        }
        double *tps = g4_malloc(sizeof(double) * (size_t)reps);
        for (int i = 0; i < reps; i++) tps[i] = lens[k] / (t[i] / 1e3);
        add_row(r, "tok/s", tps, reps, "pp%d", lens[k]);
        free(tps);
        r->prefill_ms[k] = median(t, reps);
        g4_text_state_free(s);
        s = NULL;
    }
    if ((rc = bench_prefill_long(m, p, be, ids, reps, r))) goto done;
    // Decode through g4_generate on a state of prompt + N rows, the state `g4cu generate --ids
    // ... --max-new N` makes (the decode attention's split count follows the capacity).
    const int P = 128 < ctx ? 128 : ctx / 2, N = 128 < ctx - P ? 128 : ctx - P - 1;
    const g4_text_state_opts so = {P + N, G4_GEN_DEFAULT_CHUNK, 1, 0};
    if ((rc = g4_text_state_new_opts(m, &so, &s))) goto done;
    r->state_gib = kv_gib(m, P + N);
    const g4_sampler greedy = {0, 0, 1.0f}, sampled = {1.0f, 64, 0.95f};
    double ttft_sampled;
    r->ttft_ms = r->decode_tok_s = r->decode_sampled_tok_s = -1;
    if (wanted(r, "tg%d @ pp%d", N, P) || wanted(r, "ttft pp%d", P))
        rc = bench_generate(s, ids, P, N, &greedy, reps, &r->ttft_ms, &r->decode_tok_s, r, "");
    if (!rc && (wanted(r, "tg%d @ pp%d sampled", N, P) || wanted(r, "ttft pp%d sampled", P)))
        rc = bench_generate(s, ids, P, N, &sampled, reps, &ttft_sampled, &r->decode_sampled_tok_s,
                            r, " sampled");
    if (rc) goto done;
    for (int k = 0; k < N_LONG; k++) {
        r->ttft_long_ms[k] = r->decode_long_tok_s[k] = -1;
        if (long_prompt[k] + N > ctx || !(wanted(r, "tg%d @ pp%d", N, long_prompt[k]) ||
                                          wanted(r, "ttft pp%d", long_prompt[k])))
            continue;
        const g4_text_state_opts lo_s = {long_prompt[k] + N, G4_GEN_DEFAULT_CHUNK, 1, 0};
        g4_text_state *sl = NULL;
        if (!(rc = g4_text_state_new_opts(m, &lo_s, &sl)))
            rc = bench_generate(sl, ids, long_prompt[k], N, &greedy, reps < 3 ? reps : 3,
                                &r->ttft_long_ms[k], &r->decode_long_tok_s[k], r, "");
        g4_text_state_free(sl);
        if (rc) goto done;
    }
    if (profiling(be)) {
        // Per-op split of eager decode steps (no graph) after the 128-token prompt.
        const g4_text_state_opts eo = {P + 17, P, 1, 1};
        g4_text_state *se = NULL;
        if ((rc = g4_text_state_new_opts(m, &eo, &se))) goto done;
        if (!(rc = g4_text_forward(se, ids, P, NULL, NULL, 0))) {
            g4_cuda_profile_reset();
            int32_t tok = ids[P];
            for (int j = 0; j < 16 && !rc; j++) rc = g4_text_step(se, &tok, 1, NULL, &tok);
            fprintf(human, "decode step, eager, per op (%s):\n", dir);
            g4_cuda_profile_report(human, 16);
        }
        g4_text_state_free(se);
        if (rc) goto done;
    }
    // The greedy decode again with the PLE table in pinned host memory: a second load with
    // that load option (the model is immutable once loaded).
    const size_t ple_bytes = (size_t)p->text.vocab_ple * p->text.n_layers * p->text.ple_dim * 2;
    r->ple_gib = (double)ple_bytes / (1u << 30);
    r->ttft_host_ms = r->decode_host_tok_s = -1;
    if (!(wanted(r, "tg%d @ pp%d ple-host", N, P) || wanted(r, "ttft pp%d ple-host", P))) {
        // (not wanted: -1)
    } else if (ple_host) {
        r->ttft_host_ms = r->ttft_ms;
        r->decode_host_tok_s = r->decode_tok_s;
    } else if (be->alloc_mapped) {
        g4_text_state_free(s);
        g4_text_model_free(m);
        s = NULL;
        m = NULL;
        const g4_text_load_opts ho = {.ple_host = 1};
        const g4_text_state_opts hs = {P + N, G4_GEN_DEFAULT_CHUNK, 1, 0};
        if ((rc = g4_text_model_load_opts(p, be, &ho, &m)) ||
            (rc = g4_text_state_new_opts(m, &hs, &s)) ||
            (rc = bench_generate(s, ids, P, N, &greedy, reps, &r->ttft_host_ms,
                                 &r->decode_host_tok_s, r, " ple-host")))
            goto done;
    }
done:
    free(t);
    free(ids);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

static void print_result(FILE *human, const bench_result *r) {
    fprintf(human, "%-6s load %.1f s, weights %.2f GiB, KV %.3f GiB | ", r->name, r->load_s,
            r->weights_gib, r->state_gib);
    for (int k = 0; k < 3; k++)
        if (r->prefill_ms[k] >= 0)
            fprintf(human, "prefill %d: %.2f ms (%.0f tok/s) | ", r->prefill_len[k],
                    r->prefill_ms[k], r->prefill_len[k] / (r->prefill_ms[k] / 1e3));
    if (r->prefill_long_ms >= 0)
        fprintf(human, "prefill %d: %.2f ms (%.0f tok/s) | ", G4_BENCH_LONG_PREFILL,
                r->prefill_long_ms, G4_BENCH_LONG_PREFILL / (r->prefill_long_ms / 1e3));
    if (r->decode_tok_s >= 0) // (-1: not in --filter)
        fprintf(human, "TTFT(128) %.2f ms | decode %.1f tok/s", r->ttft_ms, r->decode_tok_s);
    if (r->decode_sampled_tok_s >= 0)
        fprintf(human, "%ssampled (T 1, top-k 64, top-p 0.95) %.1f tok/s",
                r->decode_tok_s >= 0 ? " | " : "", r->decode_sampled_tok_s);
    for (int k = 0; k < N_LONG; k++)
        if (r->decode_long_tok_s[k] >= 0)
            fprintf(human, " | after %d: TTFT %.1f ms, decode %.1f tok/s", long_prompt[k],
                    r->ttft_long_ms[k], r->decode_long_tok_s[k]);
    if (r->decode_host_tok_s >= 0)
        fprintf(human,
                " | PLE table (%.2f GiB) in pinned host memory%s: TTFT %.2f ms, decode %.1f tok/s",
                r->ple_gib, r->ple_host ? " (this run)" : "", r->ttft_host_ms,
                r->decode_host_tok_s);
    if (r->vision_ms >= 0) fprintf(human, " | vision 768x768 %.2f ms", r->vision_ms);
    if (r->audio_ms >= 0) fprintf(human, " | audio 30 s %.2f ms", r->audio_ms);
    if (r->vqa_ttft_ms >= 0) fprintf(human, " | VQA TTFT (768x768) %.2f ms", r->vqa_ttft_ms);
    if (r->asr_ttft_ms >= 0) fprintf(human, " | ASR TTFT (30 s) %.2f ms", r->asr_ttft_ms);
    fprintf(human, "\n");
}

static void json_result(FILE *f, const bench_result *r) {
    cJSON *dir = cJSON_CreateString(r->dir); // (escaped)
    char *dir_s = cJSON_PrintUnformatted(dir);
    fprintf(f,
            "  \"%s\": {\"dir\": %s, \"ple_host\": %d, \"load_s\": %.3f, "
            "\"weights_gib\": %.4f, \"kv_gib\": %.4f, ",
            r->name, dir_s, r->ple_host, r->load_s, r->weights_gib, r->state_gib);
    free(dir_s);
    cJSON_Delete(dir);
    for (int k = 0; k < 3; k++)
        fprintf(f, "\"prefill_%d_ms\": %.4f, \"prefill_%d_tok_s\": %.1f, ", r->prefill_len[k],
                r->prefill_ms[k], r->prefill_len[k],
                r->prefill_ms[k] > 0 ? r->prefill_len[k] / (r->prefill_ms[k] / 1e3) : -1.0);
    fprintf(f, "\"prefill_%d_ms\": %.4f, \"prefill_%d_tok_s\": %.1f, ", G4_BENCH_LONG_PREFILL,
            r->prefill_long_ms, G4_BENCH_LONG_PREFILL,
            r->prefill_long_ms > 0 ? G4_BENCH_LONG_PREFILL / (r->prefill_long_ms / 1e3) : -1.0);
    fprintf(f, "\"ttft_128_ms\": %.4f, \"decode_tok_s\": %.2f, \"decode_sampled_tok_s\": %.2f, ",
            r->ttft_ms, r->decode_tok_s, r->decode_sampled_tok_s);
    for (int k = 0; k < N_LONG; k++)
        fprintf(f, "\"ttft_%dk_ms\": %.4f, \"decode_%dk_tok_s\": %.2f, ", long_prompt[k] / 1024,
                r->ttft_long_ms[k], long_prompt[k] / 1024, r->decode_long_tok_s[k]);
    fprintf(f,
            "\"vision_768_ms\": %.4f, \"audio_30s_ms\": %.4f, \"vqa_ttft_768_ms\": %.4f, "
            "\"asr_ttft_30s_ms\": %.4f, \"ple_gib\": %.4f, \"ple_host_ttft_128_ms\": %.4f, "
            "\"ple_host_decode_tok_s\": %.2f}",
            r->vision_ms, r->audio_ms, r->vqa_ttft_ms, r->asr_ttft_ms, r->ple_gib, r->ttft_host_ms,
            r->decode_host_tok_s);
}

// Runs the HF peer script on hf_dir (api/g4cu_dev_bench_peer.h: an argument vector, no shell) and
// prints our first package's speeds over HF's.
static int peers(FILE *human, const char *hf_dir, const char *script, const bench_result *ours,
                 int reps) {
    g4_json j;
    int rc = g4_bench_peer_run(script, hf_dir, reps, &j);
    if (rc) return rc;
    const char *dts[2] = {"bf16", "fp16"};
    for (int d = 0; d < 2; d++) {
        double dec, ttft, pf[3];
        char key[64];
        snprintf(key, sizeof key, "%s.decode_tok_s", dts[d]);
        if (g4_json_num(&j, j.root, key, 0, -1, &dec) || dec <= 0) continue;
        snprintf(key, sizeof key, "%s.ttft_128_ms", dts[d]);
        g4_json_num(&j, j.root, key, 0, -1, &ttft);
        fprintf(human, "vs HF %s: decode %.1fx (%.1f vs %.1f tok/s), TTFT %.1fx", dts[d],
                ours->decode_tok_s / dec, ours->decode_tok_s, dec, ttft / ours->ttft_ms);
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "%s.prefill_%d_ms", dts[d], ours->prefill_len[k]);
            if (!g4_json_num(&j, j.root, key, 0, -1, &pf[k]) && pf[k] > 0 &&
                ours->prefill_ms[k] > 0)
                fprintf(human, ", prefill %d %.1fx", ours->prefill_len[k],
                        pf[k] / ours->prefill_ms[k]);
        }
        fprintf(human, "\n");
    }
    g4_json_close(&j);
    return G4_OK;
}

// -o md|csv|json: one row per measurement (package, test) with the mean and standard deviation
// of its repetitions, in llama-bench's spirit.
static void print_rows(FILE *f, const char *format, const bench_result *res, int n,
                       const char *backend) {
    if (!strcmp(format, "md")) {
        fprintf(f, "| package | backend | test | reps | mean ± sd | unit |\n");
        fprintf(f, "| --- | --- | --- | ---: | ---: | --- |\n");
    } else if (!strcmp(format, "csv")) {
        fprintf(f, "package,dir,backend,test,reps,mean,sd,unit\n");
    }
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        for (int k = 0; k < res[i].n_rows; k++) {
            const bench_row *w = &res[i].rows[k];
            if (!strcmp(format, "md")) {
                fprintf(f, "| %s | %s | %s | %d | %.2f ± %.2f | %s |\n", res[i].name, backend,
                        w->test, w->n, w->mean, w->sd, w->unit);
            } else if (!strcmp(format, "csv")) {
                fprintf(f, "%s,\"", res[i].name);
                for (const char *c = res[i].dir; *c; c++) fprintf(f, *c == '"' ? "\"\"" : "%c", *c);
                fprintf(f, "\",%s,%s,%d,%.6g,%.6g,%s\n", backend, w->test, w->n, w->mean, w->sd,
                        w->unit);
            } else {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "package", res[i].name);
                cJSON_AddStringToObject(o, "dir", res[i].dir);
                cJSON_AddStringToObject(o, "backend", backend);
                cJSON_AddStringToObject(o, "test", w->test);
                cJSON_AddNumberToObject(o, "reps", w->n);
                cJSON_AddNumberToObject(o, "mean", w->mean);
                cJSON_AddNumberToObject(o, "sd", w->sd);
                cJSON_AddStringToObject(o, "unit", w->unit);
                cJSON_AddItemToArray(arr, o);
            }
        }
    if (!strcmp(format, "json")) {
        char *js = cJSON_PrintUnformatted(arr);
        G4_ASSERT(js);
        fprintf(f, "%s\n", js);
        free(js);
    }
    cJSON_Delete(arr);
}

// --- the continuous-batching step: N sequences decoded together ---------------------------------
#define BR_MAX 32 // counts in one --batch-rows list

typedef struct {
    int rows;
    double step_ms, stream_tok_s, total_tok_s;
} batch_row;

// The counts of "N[,N...]" into n[] (1 to 4096 each, at most BR_MAX); the count of them.
static int parse_batch_rows(const char *list, int *n, int *count) {
    *count = 0;
    const char *c = list;
    while (*c) {
        char *end;
        const long v = strtol(c, &end, 10);
        if (end == c || v < 1 || v > 4096 || (*end && *end != ',') || *count == BR_MAX)
            return g4_fail(G4_EUSER,
                           "bench: --batch-rows '%s': expected up to %d counts N[,N...], each 1 "
                           "to 4096",
                           list, BR_MAX);
        n[(*count)++] = (int)v;
        c = *end ? end + 1 : end;
    }
    if (!*count) return g4_fail(G4_EUSER, "bench: --batch-rows '%s': expected N[,N...]", list);
    return G4_OK;
}

// One package: for each count N, N states (the batch's slots: capacity P + STEPS + 16, the
// one-state graph captured as a slot's is) each prefilled with a 128-token prompt of its own,
// then STEPS greedy decode steps over all of them: g4_text_batch_step on the batch's own state
// (batch.c's decode_all), or g4_text_step alone for N = 1 (as decode_all does). The timed
// interval is the decode steps only (the token ids go back to the host each step, as in the
// batch). Medians of reps runs after a warm-up. G4_PROFILE=1 (a device backend): the per-op
// split of 16 more steps at each N.
static int bench_batch_pkg(FILE *human, const char *dir, g4_backend *be, const int *counts,
                           int n_counts, int reps, batch_row *out, const char **kind) {
    enum { P = 128, STEPS = 128 };
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    int max_n = 0, rc;
    for (int i = 0; i < n_counts; i++) max_n = counts[i] > max_n ? counts[i] : max_n;
    g4_text_state **st = g4_calloc((size_t)max_n, sizeof *st), *bs = NULL;
    int32_t *ids = g4_malloc(sizeof(int32_t) * (P + 1) * (size_t)max_n);
    int32_t *tok = g4_malloc(sizeof(int32_t) * (size_t)max_n);
    int32_t *next = g4_malloc(sizeof(int32_t) * (size_t)max_n);
    double *t = g4_malloc(sizeof(double) * (size_t)(reps + 1));
    if ((rc = g4_package_open(dir, &p)) || (rc = g4_text_model_load(p, be, &m))) goto done;
    *kind = p->text.weights_q4 ? "q4" : "f16";
    if (p->text.context_length < P + STEPS + 16) {
        rc = g4_fail(G4_EUSER,
                     "bench --batch-rows: %s has a context of %d tokens, below the %d "
                     "the batch bench needs",
                     dir, p->text.context_length, P + STEPS + 16);
        goto done;
    }
    for (int r = 0; r < max_n; r++) {
        bench_ids(p, ids + (size_t)r * (P + 1), P + 1, 0x5eed + 7919ull * (unsigned)r);
        const g4_text_state_opts so = {P + STEPS + 16, G4_GEN_DEFAULT_CHUNK, 1, 0};
        if ((rc = g4_text_state_new_opts(m, &so, &st[r]))) goto done;
    }
    const g4_text_state_opts bo = {1, max_n, max_n, 1}; // batch.c's step state
    if ((rc = g4_text_state_new_opts(m, &bo, &bs))) goto done;
    for (int c = 0; c < n_counts; c++) {
        const int n = counts[c];
        for (int i = 0; i <= reps && !rc; i++) { // run 0 warms up
            for (int r = 0; r < n && !rc; r++) {
                g4_text_state_reset(st[r]);
                rc = g4_text_forward(st[r], ids + (size_t)r * (P + 1), P, NULL, NULL, 0);
                tok[r] = ids[(size_t)r * (P + 1) + P];
            }
            const double a = now_ms();
            for (int k = 0; k < STEPS && !rc; k++) {
                rc = n == 1 ? g4_text_step(st[0], tok, 1, NULL, next)
                            : g4_text_batch_step(bs, st, tok, n, next);
                for (int r = 0; r < n; r++) tok[r] = g4_fed_back_id(m->cfg, next[r]);
            }
            if (i) t[i - 1] = now_ms() - a;
            if (!rc && i == reps && profiling(be)) { // 16 more steps: the per-op split
                g4_cuda_profile_reset();
                for (int k = 0; k < 16 && !rc; k++) {
                    rc = n == 1 ? g4_text_step(st[0], tok, 1, NULL, next)
                                : g4_text_batch_step(bs, st, tok, n, next);
                    for (int r = 0; r < n; r++) tok[r] = g4_fed_back_id(m->cfg, next[r]);
                }
                fprintf(human, "batch step of %d rows, per op (%s):\n", n, dir);
                g4_cuda_profile_report(human, 16);
            }
        }
        if (rc) goto done;
        const double ms = median(t, reps) / STEPS;
        out[c] = (batch_row){n, ms, 1e3 / ms, n * 1e3 / ms};
        fprintf(human,
                "%s batch rows %4d: step %7.3f ms | per stream %8.1f tok/s | total %9.1f "
                "tok/s\n",
                *kind, n, ms, out[c].stream_tok_s, out[c].total_tok_s);
        fflush(human);
    }
done:
    g4_text_state_free(bs);
    for (int r = 0; r < max_n; r++) g4_text_state_free(st[r]);
    free(st), free(ids), free(tok), free(next), free(t);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

static int bench_batch_rows(FILE *human, const char *const *pkgs, int n_pkgs, g4_backend *be,
                            const char *list, int reps, const char *json) {
    int counts[BR_MAX], n_counts, rc;
    if ((rc = parse_batch_rows(list, counts, &n_counts))) return rc;
    batch_row res[4][BR_MAX];
    const char *kinds[4] = {NULL};
    for (int i = 0; i < n_pkgs; i++) {
        if ((rc = bench_batch_pkg(human, pkgs[i], be, counts, n_counts, reps, res[i], &kinds[i])))
            return rc;
        fprintf(human, "       (%s)\n", pkgs[i]);
    }
    if (!json) return G4_OK;
    FILE *f = fopen(json, "w");
    if (!f) return g4_fail(G4_EUSER, "%s: cannot write", json);
    fprintf(f,
            "{\"backend\": \"%s\", \"reps\": %d, \"steps\": 128, \"prompt\": 128, "
            "\"batch_rows\": {\n",
            be->name, reps);
    for (int i = 0; i < n_pkgs; i++) {
        int same = 1; // a repeated kind: "q4_2"
        for (int j = 0; j < i; j++) same += !strcmp(kinds[j], kinds[i]);
        if (same > 1)
            fprintf(f, "  \"%s_%d\": [", kinds[i], same);
        else
            fprintf(f, "  \"%s\": [", kinds[i]);
        for (int c = 0; c < n_counts; c++)
            fprintf(f,
                    "%s{\"rows\": %d, \"step_ms\": %.4f, \"stream_tok_s\": %.2f, "
                    "\"total_tok_s\": %.2f}",
                    c ? ", " : "", res[i][c].rows, res[i][c].step_ms, res[i][c].stream_tok_s,
                    res[i][c].total_tok_s);
        fprintf(f, "]%s\n", i + 1 < n_pkgs ? "," : "");
    }
    fprintf(f, "}}\n");
    fclose(f);
    fprintf(human, "wrote %s\n", json);
    return G4_OK;
}

void g4cu_dev_bench_params_default(g4cu_dev_bench_params *p) {
    *p = (g4cu_dev_bench_params){.backend = "cuda", .reps = 20};
}

static int bench_model(const char *const *pkgs, int n_pkgs, const g4cu_dev_bench_params *o,
                       FILE *human, FILE *table) {
    const char *format = o->format, *json = o->json;
    const int reps = o->reps, ple_host = o->ple_host;
    if (n_pkgs < 1 || n_pkgs > 4)
        return g4_fail(G4_EUSER, "bench: %d packages: expected 1 to 4", n_pkgs);
    if (reps < 1 || reps > 100000)
        return g4_fail(G4_EUSER, "bench: reps %d: expected 1 to 100000", reps);
    if (format && strcmp(format, "md") && strcmp(format, "csv") && strcmp(format, "json"))
        return g4_fail(G4_EUSER, "bench: format '%s': expected md, csv or json", format);
    if (o->filter && o->hf_dir) // (the peer's ratios need the rows a filter leaves out)
        return g4_fail(G4_EUSER, "bench: --filter and --hf: give one of them");
    if (o->batch_rows && (o->filter || o->hf_dir || format || o->ple_host))
        return g4_fail(G4_EUSER, "bench: --batch-rows runs alone: not with --filter, --hf, -o or "
                                 "--ple-host");
    int rc;
    if (json && (rc = g4_check_output(json))) return rc;
    // The HF peer: found from the binary, and able to start, before the long benchmark.
    char *script = NULL;
    if (o->hf_dir && ((rc = g4_bench_peer_find(o->hf_script, &script)) ||
                      (rc = g4_bench_peer_check(script, o->hf_dir)))) {
        free(script);
        return rc;
    }
    g4_backend *be;
    if ((rc = g4_backend_by_name(o->backend ? o->backend : "cuda", &be))) goto done;
    if (ple_host && !be->alloc_mapped) {
        rc = g4_fail(G4_EUSER, "bench: --ple-host needs a GPU backend (--backend cuda)");
        goto done;
    }
    if (o->batch_rows) {
        rc = bench_batch_rows(human, pkgs, n_pkgs, be, o->batch_rows, reps, json);
        goto done;
    }
    bench_result res[4];
    for (int i = 0; i < n_pkgs; i++) {
        if ((rc = bench_one(human, pkgs[i], be, ple_host, reps, o->filter, o->progress, &res[i])))
            goto done;
        int same = 1; // a repeated kind: "q4_2"
        for (int j = 0; j < i; j++) same += !strcmp(res[j].kind, res[i].kind);
        if (same > 1) snprintf(res[i].name, sizeof res[i].name, "%s_%d", res[i].kind, same);
        print_result(human, &res[i]);
        fprintf(human, "       (%s)\n", pkgs[i]);
        fflush(human);
    }
    if (o->hf_dir && (rc = peers(human, o->hf_dir, script, &res[0], reps > 3 ? 3 : reps)))
        goto done;
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            rc = g4_fail(G4_EUSER, "%s: cannot write", json);
            goto done;
        }
        fprintf(f, "{\"backend\": \"%s\", \"reps\": %d, \"packages\": {\n", be->name, reps);
        for (int i = 0; i < n_pkgs; i++) {
            json_result(f, &res[i]);
            fprintf(f, "%s\n", i + 1 < n_pkgs ? "," : "");
        }
        fprintf(f, "}}\n");
        fclose(f);
        fprintf(human, "wrote %s\n", json);
    }
    if (format) print_rows(table, format, res, n_pkgs, be->name);
done:
    free(script);
    return rc;
}

int g4cu_dev_bench_model(const char *const *pkgs, int n_pkgs, const g4cu_dev_bench_params *p,
                         FILE *out, FILE *table) {
    g4cu_dev_bench_params d;
    if (!p) g4cu_dev_bench_params_default(&d), p = &d;
    if (!pkgs || !out || (p->format && !table))
        return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_bench_model: pkgs, out or (with a "
                                             "format) table is NULL"));
    for (int i = 0; i < n_pkgs && i < 4; i++)
        if (!pkgs[i])
            return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_bench_model: package %d is NULL", i));
    return g4_api_code(bench_model(pkgs, n_pkgs, p, out, table));
}
