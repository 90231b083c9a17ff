// test_api_guard.c: the public C API (include/g4cu.h, g4cu_eval.h, g4cu_dev.h) as a careless
// or hostile caller uses it (issue 34), on the tiny fixture:
//   - NULL for every pointer a public function takes (model, state, tokenizer, out
//     parameters, the FILE * a report goes to): G4CU_EUSER (or NULL / 0 for the queries that
//     return no code) and a message naming the call, never a crash;
//   - sizes it can refuse: 1,000 media in one request, g4cu_eval_write_npy of INT_MAX x INT_MAX,
//     a negative id count, PCM at 1 Hz (a 100 KB recording would be 800 M samples at 16 kHz)
//     and at 10 MHz;
//   - one state, one call at a time: a generate on the state from inside its own on_text, and
//     a second thread's generate while the first runs, are refused naming the misuse, and the
//     first call still finishes with the same answer as an undisturbed one.
// Each group counts its checks: a group that ran none fails.
#include <g4cu.h>
#include <g4cu_dev.h>
#include <g4cu_eval.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "tests/test_util.h"

static g4cu_model *model;

// rc is G4CU_EUSER and the message names `want`.
#define REFUSED(rc, want)                                                                          \
    CHECK_MSG((rc) == G4CU_EUSER && strstr(g4cu_last_error(), want), "rc %d, message: %s",       \
              (int)(rc), g4cu_last_error())

static void test_nulls(g4cu_state *s) {
    const int before = g4t_checks;
    // the model queries: NULL / 0 and a message
    CHECK(g4cu_model_backend(NULL) == NULL && strstr(g4cu_last_error(), "g4cu_model_backend"));
    CHECK(g4cu_model_n_vocab(NULL) == 0 && strstr(g4cu_last_error(), "g4cu_model_n_vocab"));
    CHECK(g4cu_model_n_ctx(NULL) == 0);
    CHECK(g4cu_model_has_vision(NULL) == 0 && g4cu_model_has_audio(NULL) == 0);
    CHECK(g4cu_model_has_tokenizer(NULL) == 0 && g4cu_model_audio_rate(NULL) == 0);
    CHECK(g4cu_model_audio_window(NULL) == 0);
    g4cu_model_free(NULL);
    g4cu_state_free(NULL);
    g4cu_result_free(NULL);
    g4cu_transcript_free(NULL);
    g4cu_tokenizer_free(NULL);
    g4cu_free(NULL);
    g4cu_eval_result_free(NULL);
    // out parameters and handles
    g4cu_model *m;
    REFUSED(g4cu_model_load(NULL, NULL, &m), "g4cu_model_load");
    REFUSED(g4cu_model_load("x", NULL, NULL), "g4cu_model_load");
    REFUSED(g4cu_state_new(NULL, NULL), "g4cu_state_new");
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "hi";
    rq.max_tokens = 1;
    g4cu_result r;
    REFUSED(g4cu_generate(s, &rq, NULL), "out is NULL");
    REFUSED(g4cu_generate(NULL, &rq, &r), "NULL");
    REFUSED(g4cu_generate(s, NULL, &r), "NULL");
    REFUSED(g4cu_generate_ids(s, NULL, 2, NULL, &r), "g4cu_generate_ids");
    const int32_t two[2] = {2, 3};
    REFUSED(g4cu_generate_ids(s, two, -1, NULL, &r), "n -1");
    REFUSED(g4cu_transcribe(s, NULL, 100, 16000, NULL, &r), "samples");
    const float half[2] = {0.5f, 0.5f};
    REFUSED(g4cu_transcribe(NULL, half, 2, 16000, NULL, &r), "NULL");
    REFUSED(g4cu_vqa(s, NULL, "q", NULL, &r), "g4cu_vqa");
    g4cu_transcript t;
    REFUSED(g4cu_transcribe_long(s, NULL, 10, NULL, &t), "no audio samples");
    REFUSED(g4cu_transcribe_long(s, half, 2, NULL, NULL), "out is NULL");
    int32_t *ids;
    int n;
    REFUSED(g4cu_tokenize(model, "hi", NULL, &n), "g4cu_tokenize");
    REFUSED(g4cu_tokenize(model, "hi", &ids, NULL), "g4cu_tokenize");
    REFUSED(g4cu_tokenize(NULL, "hi", &ids, &n), "the model is NULL");
    float one;
    REFUSED(g4cu_logits(NULL, two, 2, &one), "g4cu_logits");
    REFUSED(g4cu_logits(s, two, 2, NULL), "g4cu_logits");
    float *pcm;
    size_t ns;
    REFUSED(g4cu_decode_audio(NULL, "RIFF", 4, &pcm, &ns, NULL), "the model is NULL");
    REFUSED(g4cu_decode_audio(model, "RIFF", 4, NULL, &ns, NULL), "g4cu_decode_audio");
    REFUSED(g4cu_audio_load(NULL, "x.wav", &pcm, &ns), "the model is NULL");
    REFUSED(g4cu_audio_load(model, "x.wav", &pcm, NULL), "g4cu_audio_load");
    g4cu_tokenizer *tk;
    REFUSED(g4cu_tokenizer_load(NULL, &tk), "g4cu_tokenizer_load");
    REFUSED(g4cu_tokenizer_load("x", NULL), "g4cu_tokenizer_load");
    CHECK(g4cu_tokenizer_n_vocab(NULL) == 0 && strstr(g4cu_last_error(), "g4cu_tokenizer_n_vocab"));
    size_t len = 7;
    CHECK(g4cu_tokenizer_piece(NULL, 1, &len) == NULL && len == 0);
    REFUSED(g4cu_tokenizer_encode(NULL, "a", 1, 0, &ids, &n), "g4cu_tokenizer_encode");
    char *text;
    REFUSED(g4cu_tokenizer_decode(NULL, two, 2, 0, &text, &len), "g4cu_tokenizer_decode");
    // the measuring part
    float *lg;
    int rows, vocab;
    REFUSED(g4cu_eval_logits(g4t_env("G4_TINY_PKG"), two, 2, NULL, NULL, &rows, &vocab),
            "g4cu_eval_logits");
    REFUSED(g4cu_eval_logits(g4t_env("G4_TINY_PKG"), two, 2, NULL, &lg, NULL, &vocab),
            "g4cu_eval_logits");
    g4cu_eval_result er;
    g4cu_eval_params ep;
    g4cu_eval_params_default(&ep);
    REFUSED(g4cu_eval_run("m.jsonl", "pkg", &ep, NULL), "g4cu_eval_run");
    REFUSED(g4cu_eval_merge("dir", "librispeech", NULL, 0, NULL), "g4cu_eval_merge");
    REFUSED(g4cu_eval_run(NULL, "pkg", &ep, &er), "g4cu_eval_run");
    CHECK(g4cu_eval_task_find("librispeech", NULL) == 0);
    g4cu_perplexity_params pp;
    g4cu_perplexity_params_default(&pp);
    pp.text = "t.txt";
    pp.ctx = 16;
    REFUSED(g4cu_perplexity(g4t_env("G4_TINY_PKG"), &pp, NULL), "g4cu_perplexity");
    REFUSED(g4cu_perplexity_write_json(NULL, "d", &pp, NULL), "g4cu_perplexity_write_json");
    // the developer part: a NULL FILE * for the report
    REFUSED(g4cu_dev_inspect(g4t_env("G4_TINY_PKG"), NULL, NULL, NULL), "g4cu_dev_inspect");
    g4cu_dev_features_params fp;
    g4cu_dev_features_params_default(&fp);
    fp.audio = "x.wav";
    REFUSED(g4cu_dev_features(g4t_env("G4_TINY_PKG"), &fp, NULL), "g4cu_dev_features");
    g4cu_dev_compare_params cp;
    g4cu_dev_compare_params_default(&cp);
    REFUSED(g4cu_dev_compare("a", "b", &cp, NULL, NULL), "g4cu_dev_compare");
    REFUSED(g4cu_dev_quantize("a", "b", NULL, NULL), "g4cu_dev_quantize");
    const char *pk[1] = {NULL};
    REFUSED(g4cu_dev_bench_model(pk, 1, NULL, stdout, NULL), "g4cu_dev_bench_model");
    REFUSED(g4cu_dev_bench_model(NULL, 1, NULL, stdout, NULL), "g4cu_dev_bench_model");
    REFUSED(g4cu_dev_bench_kernels(NULL, NULL), "g4cu_dev_bench_kernels");
    REFUSED(g4cu_dev_gpu_libraries(NULL), "g4cu_dev_gpu_libraries");
    REFUSED(g4cu_dev_step_model(NULL, 0, 5), "g4cu_dev_step_model");
    REFUSED(g4cu_dev_step_model(stdout, 0, 0), "g4cu_dev_step_model: top 0");
    printf("nulls: %d checks\n", g4t_checks - before);
    CHECK(g4t_checks - before >= 45);
}

static void test_sizes(g4cu_state *s) {
    const int before = g4t_checks;
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "hi";
    rq.max_tokens = 1;
    const float tone[64] = {0.1f};
    g4cu_media *many = calloc(1000, sizeof *many);
    for (int i = 0; i < 1000; i++)
        many[i] = (g4cu_media){.kind = G4CU_AUDIO_PCM, .pcm = tone, .n_samples = 64,
                               .sample_rate = 16000};
    rq.media = many;
    rq.n_media = 1000;
    g4cu_result r;
    REFUSED(g4cu_generate(s, &rq, &r), "n_media 1000: expected 0 to 64");
    free(many);
    char *dir = g4t_tmpdir(), *npy = g4_sprintf("%s/x.npy", dir);
    REFUSED(g4cu_eval_write_npy(npy, tone, INT_MAX, INT_MAX), "over the");
    CHECK(access(npy, F_OK) != 0);
    CHECK(g4cu_eval_write_npy(npy, tone, 4, 16) == G4CU_OK); // a real one still goes
    free(npy);
    g4t_rmtree(dir);
    // PCM at 1 Hz: 100,000 samples would be 1.6 G samples at 16 kHz; refused by its rate
    float *quiet = calloc(100000, sizeof *quiet);
    REFUSED(g4cu_transcribe(s, quiet, 100000, 1, NULL, &r), "a sample rate of 1 Hz");
    REFUSED(g4cu_transcribe(s, quiet, 100000, 10000000, NULL, &r), "a sample rate of 10000000 Hz");
    free(quiet);
    // a clip longer than the window at a legal rate (37.5 s at 8 kHz): only the window's head
    // is resampled, the cut reports the whole length
    float *longer = calloc(300000, sizeof *longer);
    g4cu_media at8k = {.kind = G4CU_AUDIO_PCM, .pcm = longer, .n_samples = 300000,
                       .sample_rate = 8000};
    rq.media = &at8k;
    rq.n_media = 1;
    CHECK_MSG(g4cu_generate(s, &rq, &r) == G4CU_OK, "%s", g4cu_last_error());
    CHECK_MSG(r.n_cuts == 1 && r.cuts[0].seconds == 37.5 && r.cuts[0].used_seconds == 30.0,
              "%d cuts, %g s of %g", r.n_cuts, r.n_cuts ? r.cuts[0].used_seconds : 0,
              r.n_cuts ? r.cuts[0].seconds : 0);
    g4cu_result_free(&r);
    free(longer);
    printf("sizes: %d checks\n", g4t_checks - before);
    CHECK(g4t_checks - before >= 7);
}

// --- one call per state ----------------------------------------------------------------------
typedef struct {
    g4cu_state *s;
    int nested_rc, pieces;
    char nested_msg[512];
    atomic_int started, other_done; // on_text has run once / the other thread has tried
} busy_ctx;

// The first piece: a generate on the same state from inside the callback (refused), then it
// waits (bounded) for the main thread's attempt on the state.
static int nested(void *user, const char *text, size_t len) {
    (void)text, (void)len;
    busy_ctx *c = user;
    if (c->pieces++) return 0;
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "again";
    rq.max_tokens = 1;
    g4cu_result r;
    c->nested_rc = g4cu_generate(c->s, &rq, &r);
    snprintf(c->nested_msg, sizeof c->nested_msg, "%s", g4cu_last_error());
    atomic_store(&c->started, 1);
    for (int i = 0; i < 20000 && !atomic_load(&c->other_done); i++) usleep(500);
    return 0;
}

static void *run_first(void *arg) {
    busy_ctx *c = arg;
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "Hello, who are you?";
    rq.max_tokens = 12;
    rq.on_text = nested;
    rq.user = c;
    g4cu_result *r = calloc(1, sizeof *r);
    if (g4cu_generate(c->s, &rq, r)) {
        fprintf(stderr, "first call: %s\n", g4cu_last_error());
        free(r);
        return NULL;
    }
    return r;
}

static void test_busy(g4cu_state *s) {
    const int before = g4t_checks;
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "Hello, who are you?";
    rq.max_tokens = 12;
    g4cu_result want;
    CHECK_MSG(g4cu_generate(s, &rq, &want) == G4CU_OK, "%s", g4cu_last_error());
    busy_ctx c = {.s = s};
    pthread_t th;
    pthread_create(&th, NULL, run_first, &c);
    for (int i = 0; i < 20000 && !atomic_load(&c.started); i++) usleep(500);
    CHECK(atomic_load(&c.started));
    g4cu_result r;
    const int rc = g4cu_generate(s, &rq, &r); // while the first call waits in its on_text
    REFUSED(rc, "g4cu_generate: the state is in use by another call");
    int32_t two[2] = {2, 3};
    float *lg = malloc(sizeof(float) * (size_t)g4cu_model_n_vocab(model));
    REFUSED(g4cu_logits(s, two, 2, lg), "g4cu_logits: the state is in use");
    REFUSED(g4cu_generate_ids(s, two, 2, NULL, &r), "g4cu_generate_ids: the state is in use");
    free(lg);
    atomic_store(&c.other_done, 1);
    g4cu_result *first = NULL;
    pthread_join(th, (void **)&first);
    CHECK_MSG(c.nested_rc == G4CU_EUSER && strstr(c.nested_msg, "the state is in use"),
              "nested generate: rc %d, %s", c.nested_rc, c.nested_msg);
    CHECK_MSG(first && want.text && !strcmp(first->text, want.text),
              "the first call's answer '%s', undisturbed '%s'", first ? first->text : "(failed)",
              want.text);
    if (first) g4cu_result_free(first);
    free(first);
    g4cu_result_free(&want);
    // free again once idle: the state serves the next call
    CHECK(g4cu_generate(s, &rq, &r) == G4CU_OK);
    g4cu_result_free(&r);
    printf("busy: %d checks\n", g4t_checks - before);
    CHECK(g4t_checks - before >= 8);
}

int main(void) {
    const char *fix = g4t_env("G4_FIXTURES");
    char *tok = g4_sprintf("%s/chat/chat_bpe.json", fix);
    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    mp.backend = "cpu";
    mp.tokenizer_path = tok;
    if (g4cu_model_load(g4t_env("G4_TINY_PKG"), &mp, &model)) {
        fprintf(stderr, "test_api_guard: %s\n", g4cu_last_error());
        return 1;
    }
    g4cu_state *s;
    CHECK(g4cu_state_new(model, &s) == G4CU_OK);
    test_nulls(s);
    test_sizes(s);
    test_busy(s);
    g4cu_state_free(s);
    g4cu_model_free(model);
    free(tok);
    return g4t_finish("test_api_guard");
}
