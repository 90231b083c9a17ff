// test_api.c: the public C API (include/g4cu.h) on the tiny fixture, against HF's greedy
// generations (tests/fixtures/chat/generate_cases.jsonl, tools/python/make_generate_fixture.py):
// chat text and its stop-string cuts (HF's decoded text), the media cases from in-memory
// inputs (encoded PNG bytes, decoded RGB, a sound file's bytes, raw PCM at the file's own rate:
// HF's ids), streaming and a callback that stops, two states on two threads at once, logits
// (argmax = HF's first greedy id), the error contract (codes + one message, no exit), and the
// tokenizer alone (g4cu_tokenizer_*: every case of HF tokenizers' encodings and decodings in
// tests/fixtures/tokenizer/gemma_bpe_cases.jsonl, tools/python/make_tokenizer_fixture.py).
// What generate / asr / vqa need of it: media by path (HF's ids; a missing file named as
// `g4cu asr` names it; the 31 s clip's cut as `asr --json` reports it), ignore_stop and
// prefill_chunk (HF's ids), the system turn as parts or a string (HF's prompt-id counts in
// chat_cases.jsonl), raw ids on the full model and on a text_only model without a tokenizer
// (HF's ids), and long-form transcription (the windows by the rule, each window's tokens those
// of g4cu_transcribe on it alone, stitched by the test's own loop).
#include <g4cu.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/audio_fe.h"
#include "engine/image_fe.h"
#include "kernels/ops.h"
#include "loader/tokenizer.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

static const char *fix;
static g4cu_model *model;

// HF's ids decoded by the fixture tokenizer (skip special), for the media cases' text.
static char *hf_text(const cJSON *o) {
    char *tp = g4_sprintf("%s/chat/chat_bpe.json", fix);
    g4_tokenizer *t;
    char *text = NULL;
    size_t len;
    int n, n_eos, *ids = cf_ints(o, "ids", &n), *eos = cf_ints(o, "eos", &n_eos);
    if (g4_tokenizer_open(tp, &t) == G4_OK) {
        g4_tokenizer_decode(t, ids, (size_t)n, 1, &text, &len);
        g4_tokenizer_close(t);
    }
    free(ids);
    free(eos);
    free(tp);
    return text;
}

typedef struct {
    char buf[4096];
    size_t len;
    int calls, stop_after; // stop_after > 0: return 1 on that call
} sink;

static int collect(void *user, const char *text, size_t len) {
    sink *k = user;
    if (k->len + len < sizeof k->buf) memcpy(k->buf + k->len, text, len), k->len += len;
    return ++k->calls == k->stop_after;
}

typedef struct {
    g4cu_state *s;
    const char *want;
    int ok, rounds;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    w->ok = 1;
    for (int i = 0; i < w->rounds; i++) {
        g4cu_request rq;
        g4cu_request_default(&rq);
        rq.text = "Hello, who are you?";
        rq.max_tokens = 40;
        g4cu_result r;
        if (g4cu_generate(w->s, &rq, &r) || strcmp(r.text, w->want)) w->ok = 0;
        g4cu_result_free(&r);
    }
    return NULL;
}

static void test_errors(void) {
    g4cu_model *m = (g4cu_model *)1;
    CHECK_INT(g4cu_model_load("/nonexistent/pkg", NULL, &m), G4CU_EUSER);
    CHECK(m == NULL);
    CHECK_MSG(strstr(g4cu_last_error(), "/nonexistent/pkg") != NULL, "message: %s",
              g4cu_last_error());
    g4cu_model_params p;
    g4cu_model_params_default(&p);
    p.backend = "tpu";
    CHECK_INT(g4cu_model_load(g4t_env("G4_TINY_PKG"), &p, &m), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "tpu") != NULL, "message: %s", g4cu_last_error());
    // "auto" (the default): CUDA where a GPU is usable, else the CPU. Checked without a GPU
    // only (the tiny fixture's shapes are not all the CUDA kernels' shapes: gpu-tiny is theirs)
    const char *why;
    if (!g4_backend_cuda(&why)) {
        g4cu_model_params a;
        g4cu_model_params_default(&a);
        a.tokenizer_path = g4_sprintf("%s/chat/chat_bpe.json", fix);
        g4cu_model *am = NULL;
        CHECK_MSG(g4cu_model_load(g4t_env("G4_TINY_PKG"), &a, &am) == G4CU_OK, "auto: %s",
                  g4cu_last_error());
        if (am) {
            const char *b = g4cu_model_backend(am);
            CHECK_MSG(!strcmp(b, "cpu"), "auto chose '%s' without a GPU", b);
            printf("backend auto: %s\n", b);
        }
        g4cu_model_free(am);
        free((char *)a.tokenizer_path);
    }
    p.backend = "cpu"; // the package has no tokenizer.json: the error says so
    CHECK_INT(g4cu_model_load(g4t_env("G4_TINY_PKG"), &p, &m), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "tokenizer") != NULL, "message: %s", g4cu_last_error());

    g4cu_state *s;
    CHECK(g4cu_state_new(model, &s) == G4CU_OK);
    g4cu_request rq;
    g4cu_result r;
    g4cu_request_default(&rq);
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER); // no text, no media
    rq.text = "hi";
    rq.max_tokens = 0;
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "max_tokens") != NULL, "message: %s", g4cu_last_error());
    rq.max_tokens = 4;
    rq.top_p = 0;
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER);
    rq.top_p = 1;
    const uint8_t junk[16] = {1, 2, 3};
    g4cu_media bad = {.kind = G4CU_IMAGE_ENCODED, .data = junk, .size = sizeof junk};
    rq.media = &bad;
    rq.n_media = 1;
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "image 1") != NULL, "message: %s", g4cu_last_error());
    bad = (g4cu_media){.kind = G4CU_AUDIO_ENCODED, .data = junk, .size = sizeof junk};
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "audio 1") != NULL, "message: %s", g4cu_last_error());
    // bytes are decoded through a memfd: the message names them by size, never by the memfd's
    // /proc/self/fd/N (a path the caller never gave)
    CHECK_MSG(strstr(g4cu_last_error(), "audio (16 bytes)") &&
                  !strstr(g4cu_last_error(), "/proc/self/fd"),
              "message: %s", g4cu_last_error());
    float *pcm = NULL;
    size_t n_pcm = 0;
    CHECK_INT(g4cu_decode_audio(model, junk, sizeof junk, &pcm, &n_pcm, NULL), G4CU_EUSER);
    CHECK_MSG(!strncmp(g4cu_last_error(), "audio (16 bytes): not a sound file", 34) &&
                  !strstr(g4cu_last_error(), "/proc/self/fd"),
              "message: %s", g4cu_last_error());
    CHECK(pcm == NULL && n_pcm == 0);
    const float nan_pcm[400] = {[7] = 0.0f / 0.0f};
    CHECK_INT(g4cu_transcribe(s, nan_pcm, 400, 16000, NULL, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "finite") != NULL, "message: %s", g4cu_last_error());
    const int32_t big[1] = {1 << 30};
    float one;
    CHECK_INT(g4cu_logits(s, big, 1, &one), G4CU_EUSER);
    // the state still serves after every refusal
    rq.media = NULL, rq.n_media = 0;
    CHECK(g4cu_generate(s, &rq, &r) == G4CU_OK && r.n_tokens >= 1);
    g4cu_result_free(&r);
    g4cu_state_free(s);
}

// "e28c" -> bytes (malloc'ed, NUL after them); 0 on a malformed string.
static int unhex(const char *h, char **out, size_t *n) {
    const size_t len = strlen(h);
    if (len % 2) return 0;
    char *b = g4_malloc(len / 2 + 1);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return free(b), 0;
        b[i] = (char)v;
    }
    b[len / 2] = 0;
    *out = b;
    *n = len / 2;
    return 1;
}

static void test_tokenizer(void) {
    char *path = g4_sprintf("%s/tokenizer/gemma_bpe.json", fix);
    char *cases = g4_sprintf("%s/tokenizer/gemma_bpe_cases.jsonl", fix);
    g4cu_tokenizer *t = (g4cu_tokenizer *)1;
    CHECK_INT(g4cu_tokenizer_load("/nonexistent/tok.json", &t), G4CU_EUSER);
    CHECK(t == NULL);
    CHECK_MSG(strstr(g4cu_last_error(), "/nonexistent/tok.json") != NULL, "message: %s",
              g4cu_last_error());
    if (g4cu_tokenizer_load(path, &t)) {
        CHECK_MSG(0, "g4cu_tokenizer_load: %s", g4cu_last_error());
        free(path), free(cases);
        return;
    }
    cf_lines l = cf_read(cases);
    int n_enc = 0, n_dec = 0;
    for (int k = 0; k < l.n; k++) {
        const cJSON *c = l.line[k];
        const char *kind = cf_str(c, "kind"), *name = cf_str(c, "name"), *hex = cf_str(c, "hex");
        if (!strcmp(kind, "meta")) {
            CHECK_INT(g4cu_tokenizer_n_vocab(t), cf_int(c, "n_vocab"));
            continue;
        }
        char *bytes = NULL;
        size_t nb = 0;
        int n_want, *want = cf_ints(c, "ids", &n_want);
        CHECK_MSG(hex && unhex(hex, &bytes, &nb), "case %s: no hex", name);
        if (!strcmp(kind, "encode")) {
            int32_t *got = NULL;
            int n_got = -1;
            const int rc = g4cu_tokenizer_encode(
                t, bytes, nb, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special")), &got, &n_got);
            CHECK_MSG(rc == G4CU_OK && n_got == n_want &&
                          (n_want == 0 || !memcmp(got, want, sizeof(int) * (size_t)n_want)),
                      "encode '%s': %d ids, HF %d (%s)", name, n_got, n_want,
                      rc ? g4cu_last_error() : "ok");
            if (n_got > 0) { // each id's piece is the vocabulary's
                size_t len;
                CHECK(g4cu_tokenizer_piece(t, got[0], &len) != NULL && len > 0);
            }
            g4cu_free(got);
            n_enc++;
        } else {
            char *text = NULL;
            size_t len = 0;
            const int rc = g4cu_tokenizer_decode(
                t, (const int32_t *)want, n_want,
                cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special")), &text, &len);
            CHECK_MSG(rc == G4CU_OK && len == nb && !memcmp(text, bytes, nb),
                      "decode '%s': '%.*s', HF '%s' (%s)", name, (int)len, text ? text : "",
                      bytes ? bytes : "", rc ? g4cu_last_error() : "ok");
            g4cu_free(text);
            n_dec++;
        }
        free(want);
        free(bytes);
    }
    printf("g4cu_tokenizer: %d encode and %d decode cases of HF's\n", n_enc, n_dec);
    CHECK(n_enc > 100 && n_dec > 100);
    // the errors: an id outside the vocabulary, invalid UTF-8; the piece of a bad id is NULL
    const int32_t bad[2] = {2, 1 << 30};
    char *text = (char *)1;
    size_t len = 1;
    CHECK_INT(g4cu_tokenizer_decode(t, bad, 2, 0, &text, &len), G4CU_EUSER);
    CHECK(text == NULL && len == 0);
    int32_t *ids = (int32_t *)1;
    int n = 1;
    CHECK_INT(g4cu_tokenizer_encode(t, "a\xff", 2, 0, &ids, &n), G4CU_EUSER);
    CHECK(ids == NULL && n == 0);
    CHECK_MSG(strstr(g4cu_last_error(), "UTF-8") != NULL, "message: %s", g4cu_last_error());
    CHECK(g4cu_tokenizer_piece(t, -1, &len) == NULL && len == 0);
    CHECK(g4cu_tokenizer_piece(t, g4cu_tokenizer_n_vocab(t), &len) == NULL && len == 0);
    g4cu_tokenizer_free(t);
    cf_free(&l);
    free(path);
    free(cases);
}

// --- what the commands need of the API (issue 20: generate, asr, vqa on include/g4cu.h) ------

// The generate_cases.jsonl line of kind/name/package.
static const cJSON *gen_case(const cf_lines *l, const char *kind, const char *name,
                             const char *package) {
    for (int c = 0; c < l->n; c++) {
        const cJSON *o = l->line[c];
        if (!strcmp(cf_str(o, "kind"), kind) && !strcmp(cf_str(o, "name"), name) &&
            (!package || !strcmp(cf_str(o, "package"), package)))
            return o;
    }
    return NULL;
}

// r's tokens are HF's ids want[0..nw).
static int same_ids(const g4cu_result *r, const int *want, int nw) {
    return r->tokens && r->n_tokens == nw && !memcmp(r->tokens, want, sizeof(int) * (size_t)nw);
}

// Media by path: a missing file is a user error naming it (as `g4cu asr` says it:
// test_bad_inputs.sh), and a clip longer than the audio window is cut and reported (as `g4cu
// asr --json` reports long_31s.flac: test_hardening.sh, 31 s of which 30 s were used).
static void test_paths(g4cu_state *s) {
    char *media = g4_sprintf("%s/frontends/media", fix);
    char *none = g4_sprintf("%s/none.wav", media), *none_img = g4_sprintf("%s/none.png", media);
    char *long31 = g4_sprintf("%s/long_31s.flac", media);
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.max_tokens = 1;
    g4cu_result r;
    g4cu_media md = {.kind = G4CU_AUDIO_FILE, .path = none};
    rq.media = &md;
    rq.n_media = 1;
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "none.wav: cannot open: No such file or directory"),
              "missing audio: %s", g4cu_last_error());
    CHECK(r.text == NULL && r.tokens == NULL && r.cuts == NULL);
    md = (g4cu_media){.kind = G4CU_IMAGE_FILE, .path = none_img};
    g4cu_request opts = rq;
    opts.media = NULL, opts.n_media = 0;
    CHECK_INT(g4cu_vqa(s, &md, "What is it?", &opts, &r), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), none_img), "missing image: %s", g4cu_last_error());
    md = (g4cu_media){.kind = G4CU_AUDIO_FILE};
    CHECK_INT(g4cu_generate(s, &rq, &r), G4CU_EUSER); // no path
    // the long clip: cut to the window, said in the result
    md = (g4cu_media){.kind = G4CU_AUDIO_FILE, .path = long31};
    rq.text = "What is this?";
    CHECK_MSG(g4cu_generate(s, &rq, &r) == G4CU_OK, "%s", g4cu_last_error());
    CHECK_MSG(r.n_cuts == 1 && r.cuts[0].path == long31 && fabs(r.cuts[0].seconds - 31) < 1e-9 &&
                  fabs(r.cuts[0].used_seconds - 30) < 1e-9 && fabs(r.audio_seconds_cut - 1) < 1e-9,
              "long_31s.flac: %d cuts (%s, %g s, %g s used)", r.n_cuts,
              r.n_cuts ? r.cuts[0].path : "-", r.n_cuts ? r.cuts[0].seconds : 0,
              r.n_cuts ? r.cuts[0].used_seconds : 0);
    g4cu_result_free(&r);
    CHECK(r.cuts == NULL && r.n_cuts == 0);
    free(none), free(none_img), free(long31), free(media);
}

// The request's additions on chat_text (HF's greedy ids and its stop-string cuts): a stop string
// also in ignore_stop does not stop (HF's whole generation, as `generate --ignore-stop` pins it);
// a small prefill chunk gives HF's ids; --json's max_new and rates come from the result; the
// system turn as parts or as a string gives HF's prompt (chat_cases.jsonl's system_parts and
// system_string: HF's processor on this template and tokenizer; their prompt-id counts).
static void test_request(g4cu_state *s, const cf_lines *l) {
    const cJSON *o = gen_case(l, "text", "chat_text", "mobius-tiny-f16");
    CHECK(o != NULL);
    if (!o) return;
    int nw, *hw = cf_ints(o, "ids", &nw);
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.text = "Hello, who are you?";
    rq.max_tokens = cf_int(o, "max_new");
    g4cu_result r;
    int n_ignored = 0;
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItem(o, "stops")) {
        const char *stop = cf_str(st, "stop");
        g4cu_request q = rq;
        q.stop = &stop;
        q.n_stop = 1;
        q.ignore_stop = &stop;
        q.n_ignore_stop = 1;
        CHECK(g4cu_generate(s, &q, &r) == G4CU_OK);
        CHECK_MSG(same_ids(&r, hw, nw) && !strcmp(r.stop_reason, "max_new") && !r.stop_string,
                  "ignore_stop '%s': %d tokens, %s", stop, r.n_tokens, r.stop_reason);
        g4cu_result_free(&r);
        n_ignored++;
    }
    CHECK(n_ignored >= 2);
    const char *null_stop = NULL;
    g4cu_request q = rq;
    q.ignore_stop = &null_stop;
    q.n_ignore_stop = 1;
    CHECK_INT(g4cu_generate(s, &q, &r), G4CU_EUSER);
    for (int chunk = 1; chunk <= 7; chunk += 6) {
        q = rq;
        q.prefill_chunk = chunk;
        CHECK(g4cu_generate(s, &q, &r) == G4CU_OK);
        CHECK_MSG(same_ids(&r, hw, nw), "prefill_chunk %d: first difference at %d", chunk,
                  cf_first_diff((const int *)r.tokens, r.n_tokens, hw, nw));
        CHECK_INT(r.max_new, rq.max_tokens);
        CHECK(r.prefill_tok_s > 0 && r.decode_tok_s > 0 && r.prefill_ms > 0);
        g4cu_result_free(&r);
    }
    q.prefill_chunk = -1;
    CHECK_INT(g4cu_generate(s, &q, &r), G4CU_EUSER);
    free(hw);

    char *cp = g4_sprintf("%s/chat/chat_cases.jsonl", fix);
    cf_lines cl = cf_read(cp);
    int n_sys = 0;
    for (int c = 0; c < cl.n; c++) {
        const cJSON *x = cl.line[c];
        const char *name = cf_str(x, "name");
        if (!name || (strcmp(name, "system_parts") && strcmp(name, "system_string"))) continue;
        const int parts = cJSON_IsTrue(cJSON_GetObjectItem(x, "system_parts"));
        for (int as = 0; as < 2; as++) {
            q = rq;
            q.system = cf_str(x, "system");
            q.system_as_parts = as;
            q.text = cf_str(x, "text");
            q.max_tokens = 1;
            CHECK(g4cu_generate(s, &q, &r) == G4CU_OK);
            const int hf = cJSON_GetArraySize(cJSON_GetObjectItem(x, "ids"));
            // HF's count in its own form; the other form renders the system text otherwise
            CHECK_MSG(as == parts ? r.n_prompt_tokens == hf : r.n_prompt_tokens != hf,
                      "%s as %s: %d prompt tokens, HF's %s form %d", name,
                      as ? "parts" : "a string", r.n_prompt_tokens, parts ? "parts" : "string", hf);
            g4cu_result_free(&r);
        }
        n_sys++;
    }
    CHECK_INT(n_sys, 2);
    cf_free(&cl);
    free(cp);
}

// Raw ids (`generate --ids`): HF's greedy ids after the case's prompt ids with its EOS ids, on
// the full model (with a tokenizer: text too) and on a text-only model of a package without a
// tokenizer (tiny2: ids only, as `generate --ids` prints them).
static void test_ids(g4cu_state *s, const cf_lines *l) {
    for (int pass = 0; pass < 2; pass++) {
        const char *pkg_name = pass ? "tiny2" : "mobius-tiny-f16";
        const cJSON *o = gen_case(l, "text", "ids_short", pkg_name);
        CHECK(o != NULL);
        if (!o) continue;
        g4cu_model *m = model;
        g4cu_state *st = s;
        if (pass) {
            char *dir = g4_sprintf("%s/tiny2/package", fix);
            g4cu_model_params mp;
            g4cu_model_params_default(&mp);
            mp.backend = "cpu";
            CHECK_INT(g4cu_model_load(dir, &mp, &m), G4CU_EUSER); // no tokenizer.json
            CHECK_MSG(strstr(g4cu_last_error(), "has no tokenizer.json"), "%s", g4cu_last_error());
            mp.text_only = 1;
            CHECK_MSG(g4cu_model_load(dir, &mp, &m) == G4CU_OK, "%s", g4cu_last_error());
            free(dir);
            if (!m) continue;
            CHECK(!g4cu_model_has_tokenizer(m));
            CHECK(g4cu_state_new(m, &st) == G4CU_OK);
        } else {
            CHECK(g4cu_model_has_tokenizer(m));
        }
        int n, nw, ne, *ids = cf_ints(o, "prompt_ids", &n), *want = cf_ints(o, "ids", &nw);
        int *eos = cf_ints(o, "eos", &ne);
        g4cu_request rq;
        g4cu_request_default(&rq);
        rq.max_tokens = cf_int(o, "max_new");
        rq.eos = (const int32_t *)eos;
        rq.n_eos = ne;
        g4cu_result r;
        CHECK_MSG(g4cu_generate_ids(st, (const int32_t *)ids, n, &rq, &r) == G4CU_OK, "%s: %s",
                  pkg_name, g4cu_last_error());
        CHECK_MSG(same_ids(&r, want, nw), "%s ids_short: first difference at %d", pkg_name,
                  r.tokens ? cf_first_diff((const int *)r.tokens, r.n_tokens, want, nw) : 0);
        CHECK_INT(r.n_prompt_tokens, n);
        CHECK(pass ? r.text == NULL : r.text != NULL);
        g4cu_result_free(&r);
        // the ids are the whole prompt; an id outside the vocabulary is the engine's error
        g4cu_request bad = rq;
        bad.text = "x";
        CHECK_INT(g4cu_generate_ids(st, (const int32_t *)ids, n, &bad, &r), G4CU_EUSER);
        const int32_t out_of_vocab[2] = {2, 1 << 20};
        CHECK_INT(g4cu_generate_ids(st, out_of_vocab, 2, &rq, &r), G4CU_EUSER);
        CHECK_MSG(strstr(g4cu_last_error(), "outside the vocabulary"), "%s", g4cu_last_error());
        CHECK_INT(g4cu_generate_ids(st, (const int32_t *)ids, 0, &rq, &r), G4CU_EUSER);
        if (pass) { // no tokenizer: no chat template, no stop strings
            bad = rq;
            bad.text = "hi";
            CHECK_INT(g4cu_generate(st, &bad, &r), G4CU_EUSER);
            CHECK_MSG(strstr(g4cu_last_error(), "text_only"), "%s", g4cu_last_error());
            bad.text = NULL;
            const char *stop = "a";
            bad.stop = &stop;
            bad.n_stop = 1;
            CHECK_INT(g4cu_generate_ids(st, (const int32_t *)ids, n, &bad, &r), G4CU_EUSER);
            int32_t *t;
            int nt;
            CHECK_INT(g4cu_tokenize(m, "hi", &t, &nt), G4CU_EUSER);
            g4cu_state_free(st);
            g4cu_model_free(m);
        }
        free(ids), free(want), free(eos);
    }
}

static int no_text(void *user, const char *text, size_t len) {
    (void)text, (void)len;
    ++*(int *)user;
    return 0;
}

// Long-form transcription on the fixture's 7.3 s speech clip, in 3 s windows overlapping by
// 0.5 s: the windows the rule gives (written out here: starts k * (window - overlap), the last
// ending at the end, segment bounds in the middle of each overlap), each window's tokens those
// of g4cu_transcribe on that window alone (without the EOS that ended it; the one-window call
// is HF's on the media cases), stitched by this test's own loop (the longest suffix of the
// previous window's tokens that the next starts with is dropped), the text the kept tokens
// decoded together by the tokenizer alone.
static void test_long(g4cu_state *s) {
    CHECK_INT((int)g4cu_model_audio_window(model), 480000);
    char *path = g4_sprintf("%s/frontends/media/speech_7.3s_8k.flac", fix);
    float *pcm;
    size_t n;
    CHECK_MSG(g4cu_audio_load(model, path, &pcm, &n) == G4CU_OK, "%s", g4cu_last_error());
    CHECK_INT((int)n, 116800); // 58400 frames at 8 kHz, at 16 kHz
    const size_t W = 48000, O = 8000;
    size_t start[8], end[8];
    int k = 0;
    for (size_t a = 0;; a += W - O) {
        start[k] = a;
        end[k] = a + W < n ? a + W : n;
        k++;
        if (a + W >= n) break;
    }
    CHECK_INT(k, 3);
    g4cu_request rq;
    g4cu_request_default(&rq);
    rq.max_tokens = 3;
    int32_t kept[8][8], all[64];
    int nk[8], drop[8], nt[8], n_all = 0, prev_n = 0;
    int32_t prev[8];
    for (int i = 0; i < k; i++) {
        g4cu_result r;
        CHECK(g4cu_transcribe(s, pcm + start[i], end[i] - start[i], 16000, &rq, &r) == G4CU_OK);
        nt[i] = r.n_tokens - (r.stop_token >= 0 && r.n_tokens);
        drop[i] = 0;
        for (int d = nt[i] < prev_n ? nt[i] : prev_n; i && d > 0 && !drop[i]; d--)
            if (!memcmp(prev + prev_n - d, r.tokens, sizeof(int32_t) * (size_t)d)) drop[i] = d;
        nk[i] = nt[i] - drop[i];
        memcpy(kept[i], r.tokens + drop[i], sizeof(int32_t) * (size_t)nk[i]);
        memcpy(all + n_all, kept[i], sizeof(int32_t) * (size_t)nk[i]);
        n_all += nk[i];
        memcpy(prev, r.tokens, sizeof(int32_t) * (size_t)nt[i]);
        prev_n = nt[i];
        g4cu_result_free(&r);
    }
    int calls = 0;
    rq.on_text = no_text;
    rq.user = &calls;
    g4cu_transcribe_long_params lp;
    g4cu_transcribe_long_params_default(&lp);
    lp.opts = &rq;
    lp.window = W;
    lp.overlap = O;
    g4cu_transcript t;
    CHECK_MSG(g4cu_transcribe_long(s, pcm, n, &lp, &t) == G4CU_OK, "%s", g4cu_last_error());
    CHECK_INT(calls, 0); // the text is final only once stitched
    CHECK_INT(t.n_segments, k);
    CHECK(t.sample_rate == 16000 && t.n_samples == n && t.window == W && t.overlap == O);
    for (int i = 0; i < k && i < t.n_segments; i++) {
        const g4cu_segment *g = &t.segments[i];
        const size_t s0 = i ? (start[i] + end[i - 1]) / 2 : 0,
                     s1 = i + 1 < k ? (start[i + 1] + end[i]) / 2 : n;
        CHECK_MSG(g->window_start == start[i] && g->window_end == end[i] && g->start == s0 &&
                      g->end == s1,
                  "window %d: [%zu, %zu) segment [%zu, %zu), expected [%zu, %zu) [%zu, %zu)", i,
                  g->window_start, g->window_end, g->start, g->end, start[i], end[i], s0, s1);
        CHECK_MSG(g->window_tokens == nt[i] && g->dropped_tokens == drop[i] &&
                      g->n_tokens == nk[i] &&
                      !memcmp(g->tokens, kept[i], sizeof(int32_t) * (size_t)nk[i]),
                  "window %d: %d tokens (%d dropped), expected %d (%d dropped)", i,
                  g->window_tokens, g->dropped_tokens, nt[i], drop[i]);
        CHECK(g->text != NULL);
    }
    char *tp = g4_sprintf("%s/chat/chat_bpe.json", fix);
    g4cu_tokenizer *tk;
    char *want = NULL;
    size_t wl = 0;
    CHECK(g4cu_tokenizer_load(tp, &tk) == G4CU_OK);
    CHECK(g4cu_tokenizer_decode(tk, all, n_all, 1, &want, &wl) == G4CU_OK);
    CHECK_MSG(t.text && want && t.text_len == wl && !memcmp(t.text, want, wl),
              "the stitched text '%s', expected '%s'", t.text, want);
    printf("long-form: %d windows, %d tokens kept\n", t.n_segments, n_all);
    g4cu_transcript_free(&t);
    CHECK(t.segments == NULL && t.text == NULL);
    // errors: a window longer than the audio tower's, an overlap not shorter than the window;
    // they start with the name
    lp.window = 480001;
    lp.name = "clip.flac";
    CHECK_INT(g4cu_transcribe_long(s, pcm, n, &lp, &t), G4CU_EUSER);
    CHECK_MSG(!strncmp(g4cu_last_error(), "clip.flac: ", 11), "%s", g4cu_last_error());
    lp.window = W, lp.overlap = W;
    CHECK_INT(g4cu_transcribe_long(s, pcm, n, &lp, &t), G4CU_EUSER);
    CHECK_INT(g4cu_transcribe_long(s, pcm, 0, &lp, &t), G4CU_EUSER);
    g4cu_free(pcm);
    CHECK_INT(g4cu_audio_load(model, "/nonexistent/x.wav", &pcm, &n), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "/nonexistent/x.wav: cannot open"), "%s",
              g4cu_last_error());
    CHECK(pcm == NULL && n == 0);
    g4cu_free(want);
    g4cu_tokenizer_free(tk);
    free(tp);
    free(path);
}

int main(void) {
    fix = g4t_env("G4_FIXTURES");
    char *cases = g4_sprintf("%s/chat/generate_cases.jsonl", fix);
    char *tok = g4_sprintf("%s/chat/chat_bpe.json", fix);
    cf_lines l = cf_read(cases);
    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    mp.backend = "cpu";
    mp.tokenizer_path = tok;
    if (g4cu_model_load(g4t_env("G4_TINY_PKG"), &mp, &model)) {
        fprintf(stderr, "test_api: %s\n", g4cu_last_error());
        return 1;
    }
    CHECK(!strcmp(g4cu_model_backend(model), "cpu"));
    CHECK(g4cu_model_has_vision(model) && g4cu_model_has_audio(model));
    g4cu_state *s;
    CHECK(g4cu_state_new(model, &s) == G4CU_OK);

    int n_media = 0, n_stops = 0;
    const char *chat_want = NULL;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        const char *kind = cf_str(o, "kind"), *name = cf_str(o, "name");
        if (!strcmp(kind, "text") && !strcmp(name, "chat_text") &&
            !strcmp(cf_str(o, "package"), "mobius-tiny-f16")) {
            chat_want = cf_str(o, "text");
            g4cu_request rq;
            g4cu_request_default(&rq);
            rq.text = "Hello, who are you?";
            rq.max_tokens = cf_int(o, "max_new");
            sink k = {0};
            rq.on_text = collect;
            rq.user = &k;
            g4cu_result r;
            CHECK_MSG(g4cu_generate(s, &rq, &r) == G4CU_OK, "%s", g4cu_last_error());
            CHECK_INT(r.n_prompt_tokens, cJSON_GetArraySize(cJSON_GetObjectItem(o, "prompt_ids")));
            CHECK_MSG(r.text && !strcmp(r.text, chat_want), "chat_text: got '%s'", r.text);
            CHECK_MSG(k.len == r.text_len && !memcmp(k.buf, r.text, k.len),
                      "the streamed pieces do not add up to the text");
            CHECK(!strcmp(r.finish_reason, "length"));
            // the ids are HF's; it ran to max_tokens (no EOS, no stop string)
            int nw, *hw = cf_ints(o, "ids", &nw);
            CHECK_MSG(r.tokens && r.n_tokens == nw &&
                          !memcmp(r.tokens, hw, sizeof(int) * (size_t)nw),
                      "chat_text: %d ids, HF %d, first difference at %d", r.n_tokens, nw,
                      r.tokens ? cf_first_diff((const int *)r.tokens, r.n_tokens, hw, nw) : 0);
            CHECK(r.stop_token == -1 && r.stop_string == NULL && !strcmp(r.stop_reason, "max_new"));
            g4cu_result_free(&r);
            // an extra EOS id: HF's j-th id (the first not seen before it) ends it there, kept
            int j = 1;
            for (; j < nw; j++) {
                int seen = 0;
                for (int i = 0; i < j; i++) seen |= hw[i] == hw[j];
                if (!seen) break;
            }
            if (j < nw) {
                g4cu_request q = rq;
                const int32_t eos = hw[j];
                q.eos = &eos;
                q.n_eos = 1;
                q.on_text = NULL;
                CHECK(g4cu_generate(s, &q, &r) == G4CU_OK);
                CHECK_MSG(r.n_tokens == j + 1 &&
                              !memcmp(r.tokens, hw, sizeof(int) * (size_t)(j + 1)) &&
                              r.stop_token == eos && !strcmp(r.stop_reason, "eos") &&
                              !strcmp(r.finish_reason, "stop"),
                          "eos %d (HF's id %d): %d tokens, stop_token %d, %s", eos, j, r.n_tokens,
                          r.stop_token, r.stop_reason);
                g4cu_result_free(&r);
                const int32_t bad_eos = 1 << 30;
                q.eos = &bad_eos;
                CHECK_INT(g4cu_generate(s, &q, &r), G4CU_EUSER);
                CHECK_MSG(strstr(g4cu_last_error(), "eos id") != NULL, "message: %s",
                          g4cu_last_error());
            }
            CHECK_MSG(j < nw, "chat_text: no id of HF's that is not a repeat");
            free(hw);
            CHECK(r.tokens == NULL && r.text == NULL); // freed and zeroed
            // a callback that stops after its first piece
            sink k1 = {.stop_after = 1};
            rq.user = &k1;
            CHECK(g4cu_generate(s, &rq, &r) == G4CU_OK);
            CHECK_MSG(!strcmp(r.finish_reason, "cancelled") && r.n_tokens < rq.max_tokens,
                      "stop from the callback: %s after %d tokens", r.finish_reason, r.n_tokens);
            CHECK_INT(k1.calls, 1);
            CHECK(!strcmp(r.stop_reason, "cancelled") && r.stop_token == -1);
            g4cu_result_free(&r);
            // HF's text cut before each stop string
            const cJSON *st;
            cJSON_ArrayForEach(st, cJSON_GetObjectItem(o, "stops")) {
                const char *stop = cf_str(st, "stop");
                g4cu_request q;
                g4cu_request_default(&q);
                q.text = rq.text;
                q.max_tokens = rq.max_tokens;
                q.stop = &stop;
                q.n_stop = 1;
                CHECK(g4cu_generate(s, &q, &r) == G4CU_OK);
                CHECK_MSG(!strcmp(r.text, cf_str(st, "text")) && !strcmp(r.finish_reason, "stop"),
                          "stop '%s': got '%s' (%s)", stop, r.text, r.finish_reason);
                CHECK_INT(r.n_tokens, cf_int(st, "n_tokens"));
                CHECK_MSG(r.stop_string == stop && !strcmp(r.stop_reason, "stop_string"),
                          "stop '%s': stop_string %s, reason %s", stop,
                          r.stop_string ? r.stop_string : "NULL", r.stop_reason);
                g4cu_result_free(&r);
                n_stops++;
            }
        }
        if (!strcmp(kind, "text") && !strcmp(name, "ids_short") &&
            !strcmp(cf_str(o, "package"), "mobius-tiny-f16")) {
            int n, nw, *ids = cf_ints(o, "prompt_ids", &n), *want = cf_ints(o, "ids", &nw);
            float *lg = malloc(sizeof(float) * (size_t)g4cu_model_n_vocab(model));
            for (int i = 0; i < g4cu_model_n_vocab(model); i++) lg[i] = 0.0f / 0.0f; // poison
            CHECK(g4cu_logits(s, (const int32_t *)ids, n, lg) == G4CU_OK);
            int best = 0;
            for (int i = 1; i < g4cu_model_n_vocab(model); i++)
                if (lg[i] > lg[best]) best = i;
            CHECK_MSG(best == want[0] && lg[best] == lg[best], "logits argmax %d, HF's %d", best,
                      want[0]);
            free(lg);
            free(ids);
            free(want);
        }
        if (strcmp(kind, "media")) continue;
        // media from memory: the file's bytes, and the decoded form (RGB / PCM at its rate);
        // then the file by its path
        char *file = g4_sprintf("%s/%s", fix, cf_str(o, "file"));
        char *bytes;
        size_t size;
        CHECK(g4_read_file(file, &bytes, &size) == G4_OK);
        char *want = hf_text(o);
        const int image = !strcmp(cf_str(o, "media"), "image");
        for (int form = 0; form < 3; form++) {
            g4cu_media md = {.kind = image ? G4CU_IMAGE_ENCODED : G4CU_AUDIO_ENCODED,
                             .data = bytes, .size = size};
            g4_image img = {0};
            g4_audio au = {0};
            if (form == 1 && image) {
                CHECK(g4_image_load(file, &img) == G4_OK);
                md = (g4cu_media){.kind = G4CU_IMAGE_RGB, .rgb = img.rgb, .width = img.width,
                                  .height = img.height};
            } else if (form == 1) {
                {
                    // the file's samples at its own rate: the API resamples them
                    g4_audio probe;
                    CHECK(g4_audio_load(file, 16000, 0, &probe) == G4_OK);
                    int rate = probe.src_rate;
                    g4_audio_free(&probe);
                    CHECK(g4_audio_load(file, rate, 0, &au) == G4_OK);
                }
                md = (g4cu_media){.kind = G4CU_AUDIO_PCM, .pcm = au.samples,
                                  .n_samples = (size_t)au.n_samples, .sample_rate = au.sample_rate};
            } else if (form == 2) {
                md = (g4cu_media){.kind = image ? G4CU_IMAGE_FILE : G4CU_AUDIO_FILE, .path = file};
            }
            g4cu_request rq;
            g4cu_request_default(&rq);
            rq.max_tokens = cf_int(o, "max_new");
            g4cu_result r;
            int rc = image ? g4cu_vqa(s, &md, cf_str(o, "text"), &rq, &r)
                           : (rq.text = cf_str(o, "text"), rq.media = &md, rq.n_media = 1,
                              g4cu_generate(s, &rq, &r));
            CHECK_MSG(rc == G4CU_OK, "%s form %d: %s", name, form, g4cu_last_error());
            if (rc == G4CU_OK) {
                CHECK_INT(r.n_prompt_tokens,
                          cJSON_GetArraySize(cJSON_GetObjectItem(o, "prompt_ids")));
                CHECK_MSG(want && !strcmp(r.text, want), "%s form %d: got '%s', HF '%s'", name,
                          form, r.text, want);
                int nw, *hw = cf_ints(o, "ids", &nw); // HF's ids, its EOS id last if it ended so
                const int ended = r.stop_token >= 0;
                CHECK_MSG(
                    r.n_tokens == nw && !memcmp(r.tokens, hw, sizeof(int) * (size_t)nw) &&
                        (!ended || (r.stop_token == hw[nw - 1] && !strcmp(r.stop_reason, "eos"))),
                    "%s form %d: %d ids (%s), HF %d, first difference at %d", name, form,
                    r.n_tokens, r.stop_reason, nw,
                    cf_first_diff((const int *)r.tokens, r.n_tokens, hw, nw));
                free(hw);
                CHECK_INT(r.n_cuts, 0); // (the clips are shorter than the window)
                printf("%s (%s): %d prompt tokens, %d generated, %s\n", name,
                       form == 2 ? "path"
                       : form    ? (image ? "rgb" : "pcm")
                                 : "bytes",
                       r.n_prompt_tokens, r.n_tokens, r.finish_reason);
            }
            g4cu_result_free(&r);
            g4_image_free(&img);
            g4_audio_free(&au);
        }
        free(want);
        free(bytes);
        free(file);
        n_media++;
    }
    CHECK_MSG(chat_want && n_stops >= 2 && n_media >= 3, "cases: chat %d, stops %d, media %d",
              chat_want != NULL, n_stops, n_media);

    // two states on two threads at once: each gets HF's answer every round
    if (chat_want) {
        worker w[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            w[i] = (worker){NULL, chat_want, 0, 3};
            CHECK(g4cu_state_new(model, &w[i].s) == G4CU_OK);
            pthread_create(&th[i], NULL, run_worker, &w[i]);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(w[i].ok, "state %d on its thread: a wrong answer", i);
            g4cu_state_free(w[i].s);
        }
    }
    test_errors();
    test_tokenizer();
    test_paths(s);
    test_request(s, &l);
    test_ids(s, &l);
    test_long(s);
    g4cu_state_free(s);
    g4cu_model_free(model);
    cf_free(&l);
    free(cases);
    free(tok);
    return g4t_finish("test_api");
}
