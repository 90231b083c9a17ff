// test_api_eval.c: the measuring part of the public C API (include/g4cu_eval.h), a case per
// function, against independent numbers or what the command tests already pin:
//   - g4cu_eval_logits on the tiny package: the last row's argmax is HF's first greedy id
//     (tests/fixtures/chat/generate_cases.jsonl, tools/python/make_generate_fixture.py), every
//     row is finite; with an image, one lone <|image|> gives byte for byte the logits of the
//     block typed out (<|image> + n x <|image|> + <image|>, n from the image front end), and
//     n + 2 - 1 more rows; a lone placeholder without a tokenizer is a user error;
//   - g4cu_eval_write_npy: the file reads back (fidelity/npy.h) as the same [rows, cols] floats,
//     and through g4cu_eval_read_npy; a 1-D and an integer .npy are refused by the reader;
//   - g4cu_perplexity on tests/fixtures/fidelity-tiny: HF fp32's perplexity and scored tokens
//     (reference.json, tools/python/make_fidelity_fixture.py) within test_perplexity.sh's
//     PPL_REL; the progress callback sees 0..chunks in order; a saved base compared with itself
//     gives KLD ~ 0 and the same top token everywhere; g4cu_perplexity_write_json writes what
//     the result holds; a too-short text is a user error;
//   - g4cu_eval_task_find / _names; g4cu_eval_merge of the recorded smoke predictions =
//     lmms-eval 0.7.2's WER (tests/fixtures/eval/smoke_expected.json); g4cu_eval_run: a bad
//     manifest is a one-line user error making no output, and a one-item run predicts and
//     scores one item (scores file written; eval-merge of its directory gives the same score).
#include <g4cu_eval.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/chat.h"
#include "engine/image_fe.h"
#include "fidelity/npy.h"
#include "loader/package.h"
#include "loader/tokenizer.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

// test_perplexity.sh's named tolerances (their reasons are written there).
#define PPL_REL 1e-3     // f16 package vs HF fp32 on the same fp16 weights
#define SELF_KLD 1.2e-4  // a run against its own 16-bit base rows
#define PPL_BASE_REL 1e-6 // the base's perplexity from its rows' float32 nll

static const char *fix, *tiny;

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static void test_logits_text(void) {
    char *cases = g4_sprintf("%s/chat/generate_cases.jsonl", fix);
    cf_lines l = cf_read(cases);
    int done = 0;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        if (strcmp(cf_str(o, "kind"), "text") || strcmp(cf_str(o, "name"), "ids_short") ||
            strcmp(cf_str(o, "package"), "mobius-tiny-f16"))
            continue;
        int n, nw, *ids = cf_ints(o, "prompt_ids", &n), *want = cf_ints(o, "ids", &nw);
        float *lg = NULL;
        int rows = -1, vocab = -1;
        CHECK(g4cu_eval_logits(tiny, (const int32_t *)ids, n, NULL, &lg, &rows, &vocab) ==
              G4CU_OK);
        CHECK_INT(rows, n);
        if (lg && rows == n && vocab > 0) {
            int finite = 1;
            for (size_t i = 0; i < (size_t)rows * vocab; i++) finite &= isfinite(lg[i]) != 0;
            CHECK_MSG(finite, "logits: a non-finite value");
            const int best = argmax(lg + (size_t)(rows - 1) * vocab, vocab);
            CHECK_MSG(best == want[0], "logits: last row's argmax %d, HF's first id %d", best,
                      want[0]);
            // g4cu_eval_write_npy: reads back as the same array
            char *dir = g4t_tmpdir(), *path = g4_sprintf("%s/l.npy", dir);
            CHECK(g4cu_eval_write_npy(path, lg, rows, vocab) == G4CU_OK);
            g4_array a = {0};
            CHECK(g4_npy_read(path, &a) == G4_OK);
            CHECK(a.dtype == G4_DT_FLOAT && a.ndim == 2 && a.shape[0] == rows &&
                  a.shape[1] == vocab && a.data &&
                  !memcmp(a.data, lg, sizeof(float) * (size_t)rows * vocab));
            g4_array_free(&a);
            // g4cu_eval_read_npy: the same floats back; a 1-D and an integer array refused
            float *back = NULL;
            int br = -1, bc = -1;
            CHECK(g4cu_eval_read_npy(path, &back, &br, &bc) == G4CU_OK);
            CHECK(br == rows && bc == vocab && back &&
                  !memcmp(back, lg, sizeof(float) * (size_t)rows * vocab));
            g4cu_free(back);
            const int64_t one[1] = {3}, two[2] = {1, 3};
            const int32_t iv[3] = {1, 2, 3};
            char *p1 = g4_sprintf("%s/one.npy", dir), *pi = g4_sprintf("%s/int.npy", dir);
            CHECK(g4_npy_write(p1, G4_DT_FLOAT, 1, one, lg) == G4_OK);
            CHECK(g4_npy_write(pi, G4_DT_INT32, 2, two, iv) == G4_OK);
            back = (float *)1;
            CHECK(g4cu_eval_read_npy(p1, &back, &br, &bc) == G4CU_EUSER && back == NULL &&
                  strstr(g4cu_last_error(), p1) && strstr(g4cu_last_error(), "2-D"));
            CHECK(g4cu_eval_read_npy(pi, &back, &br, &bc) == G4CU_EUSER && back == NULL &&
                  strstr(g4cu_last_error(), "non-floats"));
            free(p1);
            free(pi);
            char *bad = g4_sprintf("%s/no/such/dir/l.npy", dir);
            CHECK(g4cu_eval_write_npy(bad, lg, rows, vocab) == G4CU_EUSER &&
                  strstr(g4cu_last_error(), bad));
            free(bad);
            free(path);
            g4t_rmtree(dir);
        }
        g4cu_free(lg);
        free(ids);
        free(want);
        done++;
    }
    CHECK_MSG(done == 1, "%d ids_short cases of mobius-tiny-f16", done);
    cf_free(&l);
    free(cases);
    // an id outside the vocabulary: a user error, nothing returned
    const int32_t big[2] = {2, 1 << 30};
    float *lg = (float *)1;
    int rows = 7, vocab = 7;
    CHECK(g4cu_eval_logits(tiny, big, 2, NULL, &lg, &rows, &vocab) == G4CU_EUSER && !lg &&
          !rows && !vocab && *g4cu_last_error());
}

static void test_logits_image(void) {
    char *tok_path = g4_sprintf("%s/chat/chat_bpe.json", fix);
    char *img = g4_sprintf("%s/frontends/media/square_rgb.png", fix);
    g4_tokenizer *tok = NULL;
    g4_chat_tokens ct;
    g4_package *p = NULL;
    g4_image_features f;
    CHECK(g4_tokenizer_open(tok_path, &tok) == G4_OK &&
          g4_chat_tokens_find(tok, tok_path, &ct) == G4_OK);
    CHECK(g4_package_open(tiny, &p) == G4_OK && p->has_image_proc);
    CHECK(g4_image_features_load(&p->image_proc, img, &f) == G4_OK);
    const int n_img = f.n_soft_tokens;
    g4_image_features_free(&f);
    CHECK(n_img > 1);
    // 2, 5, <|image|>, 7 and 2, 5, <|image>, n x <|image|>, <image|>, 7
    const int32_t one[4] = {2, 5, ct.image, 7};
    const int n_full = 4 - 1 + n_img + 2;
    int32_t *full = malloc(sizeof(int32_t) * (size_t)n_full);
    full[0] = 2, full[1] = 5, full[2] = ct.boi;
    for (int i = 0; i < n_img; i++) full[3 + i] = ct.image;
    full[3 + n_img] = ct.eoi, full[4 + n_img] = 7;
    g4cu_eval_logits_params lp;
    g4cu_eval_logits_params_default(&lp);
    lp.image = img;
    float *a = NULL, *b = NULL;
    int ra = 0, rb = 0, va = 0, vb = 0;
    CHECK(g4cu_eval_logits(tiny, full, n_full, &lp, &a, &ra, &va) == G4CU_OK);
    // a lone placeholder needs the begin / end ids: the tiny package has no tokenizer.json
    CHECK(g4cu_eval_logits(tiny, one, 4, &lp, &b, &rb, &vb) == G4CU_EUSER && !b &&
          strstr(g4cu_last_error(), "has no tokenizer.json for the media's begin / end ids"));
    lp.tokenizer = tok_path;
    CHECK(g4cu_eval_logits(tiny, one, 4, &lp, &b, &rb, &vb) == G4CU_OK);
    CHECK_MSG(ra == n_full && rb == n_full && va == vb && va > 0,
              "rows %d / %d, want %d (vocab %d / %d)", ra, rb, n_full, va, vb);
    CHECK(a && b && ra == rb && va == vb && !memcmp(a, b, sizeof(float) * (size_t)ra * va));
    g4cu_free(a);
    g4cu_free(b);
    free(full);
    g4_package_close(p);
    g4_tokenizer_close(tok);
    free(img);
    free(tok_path);
}

typedef struct {
    int calls, last_done, in_order, total;
    double last_ppl;
} ppl_seen;

static void on_chunk(void *user, int done, int total, double ppl, double seconds) {
    ppl_seen *s = user;
    s->in_order &= done == s->calls && seconds >= 0 && (done == 0 || isfinite(ppl));
    s->calls++;
    s->last_done = done, s->total = total, s->last_ppl = ppl;
}

static double ref_num(const cJSON *ref, const char *section, const char *key) {
    const cJSON *o = section ? cJSON_GetObjectItem(ref, section) : ref;
    const cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_perplexity(void) {
    char *fx = g4_sprintf("%s/fidelity-tiny", fix), *pkg = g4_sprintf("%s/package", fx);
    char *text = g4_sprintf("%s/test.txt", fx), *refp = g4_sprintf("%s/reference.json", fx);
    cJSON *ref = g4t_read_json(refp);
    CHECK(ref != NULL);
    if (!ref) return;
    const int ctx = (int)ref_num(ref, NULL, "ctx"), chunks = (int)ref_num(ref, NULL, "chunks");
    char *dir = g4t_tmpdir(), *base = g4_sprintf("%s/base.kld", dir);
    char *json = g4_sprintf("%s/p.json", dir);

    g4cu_perplexity_params pp;
    g4cu_perplexity_params_default(&pp);
    ppl_seen seen = {.in_order = 1};
    pp.text = text;
    pp.ctx = ctx;
    pp.chunks = chunks;
    pp.save_logits = base;
    pp.progress = on_chunk;
    pp.user = &seen;
    g4cu_perplexity_result r;
    CHECK(g4cu_perplexity(pkg, &pp, &r) == G4CU_OK);
    const double want = ref_num(ref, "hf_f32", "ppl");
    CHECK_MSG(fabs(r.ppl - want) <= PPL_REL * want, "ppl %.9g, HF fp32 %.9g", r.ppl, want);
    CHECK_INT((long long)r.n_scored, (long long)ref_num(ref, "hf_f32", "scored_tokens"));
    CHECK(r.n_chunks == chunks && r.ctx == ctx && !r.has_kl && r.ppl_stderr > 0);
    CHECK_MSG(seen.in_order && seen.calls == chunks + 1 && seen.last_done == chunks &&
                  seen.total == chunks && seen.last_ppl == r.ppl,
              "progress: %d calls, last %d of %d", seen.calls, seen.last_done, seen.total);
    CHECK(g4cu_perplexity_write_json(json, pkg, &pp, &r) == G4CU_OK);
    cJSON *j = g4t_read_json(json);
    char printed[64]; // the file holds %.9g
    snprintf(printed, sizeof printed, "%.9g", r.ppl);
    CHECK(j && ref_num(j, NULL, "ppl") == strtod(printed, NULL) &&
          (size_t)ref_num(j, NULL, "scored_tokens") == r.n_scored &&
          !cJSON_GetObjectItem(j, "kld_mean"));
    cJSON_Delete(j);

    // the same package against its own base
    g4cu_perplexity_params kp;
    g4cu_perplexity_params_default(&kp);
    kp.ctx = ctx;
    kp.kl_base = base;
    g4cu_perplexity_result k;
    CHECK(g4cu_perplexity(pkg, &kp, &k) == G4CU_OK);
    CHECK_MSG(k.has_kl && k.n_scored == r.n_scored && fabs(k.kld_mean) <= SELF_KLD &&
                  k.same_top == 1 && fabs(k.ppl_base - r.ppl) <= PPL_BASE_REL * r.ppl,
              "self: kld %g, same top %g, ppl(base) %.9g vs %.9g", k.kld_mean, k.same_top,
              k.ppl_base, r.ppl);
    // errors: a text shorter than two chunks; save_logits with kl_base
    char *shortt = g4_sprintf("%s/short.txt", dir);
    CHECK(g4_write_file_atomic(shortt, "a b c", 5) == G4_OK);
    pp.text = shortt;
    pp.save_logits = NULL;
    CHECK(g4cu_perplexity(pkg, &pp, &r) == G4CU_EUSER &&
          strstr(g4cu_last_error(), "needs at least"));
    kp.save_logits = base;
    CHECK(g4cu_perplexity(pkg, &kp, &k) == G4CU_EUSER);
    free(shortt);
    cJSON_Delete(ref);
    free(json);
    free(base);
    g4t_rmtree(dir);
    free(refp);
    free(text);
    free(pkg);
    free(fx);
}

static void test_eval(void) {
    g4cu_eval_task t;
    CHECK(!strcmp(g4cu_eval_task_names(), "ocrbench|docvqa|chartqa|librispeech"));
    CHECK(g4cu_eval_task_find("docvqa_val_lite", &t) && !strcmp(t.name, "docvqa") &&
          !strcmp(t.metric, "anls") && !t.lower_is_better);
    CHECK(g4cu_eval_task_find("librispeech", &t) && t.lower_is_better);
    CHECK(!g4cu_eval_task_find("vqav2", &t) && !g4cu_eval_task_find(NULL, &t));

    // eval-merge of the recorded librispeech predictions = lmms-eval's WER
    char *dir = g4t_tmpdir(), *rec = g4_sprintf("%s/rec", dir);
    char *man = g4_sprintf("%s/eval/librispeech_smoke.jsonl", fix);
    CHECK(g4t_sh("mkdir -p '%s' && grep '\"manifest\": \"librispeech\"' '%s/eval/smoke_predictions"
                 ".jsonl' | sed -E 's/, \"manifest\": \"[a-z]*\"//' >'%s/predictions.jsonl'",
                 rec, fix, rec) == 0);
    char *exp = g4t_slurp("%s/eval/smoke_expected.json", fix);
    const char *w = exp ? strstr(exp, "\n  \"wer\": ") : NULL;
    const double want = w ? strtod(w + strlen("\n  \"wer\": "), NULL) : NAN;
    g4cu_eval_result r;
    CHECK(g4cu_eval_merge(rec, "librispeech", man, -1, &r) == G4CU_OK);
    CHECK_MSG(r.value == want && r.count == 10 && !r.failed && r.scores_path &&
                  g4_is_file(r.scores_path),
              "merged WER %.17g over %d, lmms-eval's %.17g", r.value, r.count, want);
    g4cu_eval_result_free(&r);
    CHECK(g4cu_eval_merge(rec, "vqav2", man, -1, &r) == G4CU_EUSER);
    free(exp);

    // a run: a manifest error first (no output directory made), then one item
    char *tok = g4_sprintf("%s/chat/chat_bpe.json", fix), *m1 = g4_sprintf("%s/m1.jsonl", dir);
    char *media = g4_sprintf("%s/frontends/media", fix), *out = g4_sprintf("%s/out", dir);
    const char *bad = "{\"id\": \"a\", \"image\": \"square_rgb.png\", \"question\": \"q\", "
                      "\"answers\": [\"A\"]}\n";
    CHECK(g4_write_file_atomic(m1, bad, strlen(bad)) == G4_OK);
    g4cu_eval_params ep;
    g4cu_eval_params_default(&ep);
    ep.task = "ocrbench";
    ep.tokenizer = tok;
    ep.out_dir = out;
    ep.data_dir = media;
    ep.max_new = 4;
    CHECK(g4cu_eval_run(m1, tiny, &ep, &r) == G4CU_EUSER &&
          strstr(g4cu_last_error(), "field 'category'") && !g4_is_dir(out));
    const char *good = "{\"id\": \"a\", \"image\": \"square_rgb.png\", \"question\": \"q\", "
                       "\"answers\": [\"A\"], \"category\": \"c\"}\n";
    char *m2 = g4_sprintf("%s/m2.jsonl", dir); // (m1 is an input now: never overwritten)
    CHECK(g4_write_file_atomic(m2, good, strlen(good)) == G4_OK);
    CHECK(g4cu_eval_run(m2, tiny, &ep, &r) == G4CU_OK);
    CHECK_MSG(r.selected == 1 && r.predicted == 1 && !r.resumed && r.count == 1 &&
                  r.scores_path && g4_is_file(r.scores_path),
              "run: %d selected, %d predicted, %d scored", r.selected, r.predicted, r.count);
    g4cu_eval_result mr;
    CHECK(g4cu_eval_merge(out, "ocrbench", NULL, -1, &mr) == G4CU_OK && mr.count == 1 &&
          mr.value == r.value);
    g4cu_eval_result_free(&mr);
    g4cu_eval_result_free(&r);
    free(out);
    free(media);
    free(m1);
    free(m2);
    free(tok);
    free(man);
    free(rec);
    g4t_rmtree(dir);
}

int main(void) {
    fix = g4t_env("G4_FIXTURES");
    tiny = g4t_env("G4_TINY_PKG");
    test_logits_text();
    test_logits_image();
    test_perplexity();
    test_eval();
    return g4t_finish("test_api_eval");
}
