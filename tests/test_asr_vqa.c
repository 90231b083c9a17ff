// test_asr_vqa.c: image and audio prompts end to end on the CPU (engine/pipeline.c: media file
// -> front end -> tower -> chat template -> generation) on the mobius-tiny-f16 package with
// the chat fixture's tokenizer, against HF: for each media case of
// tests/fixtures/chat/generate_cases.jsonl (HF Gemma4Processor.apply_chat_template on the same
// file, then greedy `generate` with its pixel_values / input_features), the prompt ids, the
// number of soft tokens and the generated ids must be HF's exactly (random weights give
// random text, so ids, not text, are compared; the fixture records HF's smallest top-2 logit
// gap, >= 1.5e-3, against our ~1e-4 relative tower error).
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

// A stand-in vision tower: every row is the image's patch count, so the test can see that
// these rows (and not the real tower's) reached the prompt's soft tokens.
static int stand_in_tower(void *ctx, g4_backend *ex, const g4_image_features *f, g4_buf *rows) {
    int width = *(const int *)ctx;
    CHECK(rows->type == G4_F32 && rows->rows == f->n_soft_tokens && rows->cols == width);
    float *v = g4_malloc(g4_buf_bytes(rows) + 1);
    for (size_t i = 0; i < (size_t)f->n_soft_tokens * width; i++) v[i] = (float)f->n_patches;
    ex->upload(ex, rows->data, v, g4_buf_bytes(rows));
    ex->sync(ex);
    free(v);
    return G4_OK;
}

// The soft rows of a prepared prompt, read back from the backend (they live there).
static float *soft_host(g4_pipeline *pl, const g4_soft_tokens *soft) {
    float *v = g4_malloc(g4_buf_bytes(&soft->rows) + 1);
    pl->state->be->download(pl->state->be, v, soft->rows.data, g4_buf_bytes(&soft->rows));
    return v;
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    char *path = g4_sprintf("%s/chat/generate_cases.jsonl", dir);
    char *tok_path = g4_sprintf("%s/chat/chat_bpe.json", dir);
    cf_lines l = cf_read(path);
    g4_pipeline *pl;
    if (g4_pipeline_open(g4t_env("G4_TINY_PKG"), g4_backend_cpu(), tok_path, &pl)) {
        fprintf(stderr, "%s\n", g4_error());
        return 1;
    }
    int n_cases = 0;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        if (strcmp(cf_str(o, "kind"), "media")) continue;
        const char *name = cf_str(o, "name");
        char *file = g4_sprintf("%s/%s", dir, cf_str(o, "file"));
        const char *files[1] = {file};
        int image = !strcmp(cf_str(o, "media"), "image");
        g4_prompt pr = {.text = cf_str(o, "text")};
        if (image)
            pr.images = files, pr.n_images = 1;
        else
            pr.audio = files, pr.n_audio = 1;
        int n_prompt, n_want, n_eos;
        int *prompt = cf_ints(o, "prompt_ids", &n_prompt);
        int *want = cf_ints(o, "ids", &n_want);
        int *eos = cf_ints(o, "eos", &n_eos);

        g4_ids ids = {0};
        g4_soft_tokens soft = {0};
        int rc = g4_pipeline_prepare(pl, &pr, &ids, &soft);
        CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
        int d = cf_first_diff(ids.v, (int)ids.n, prompt, n_prompt);
        CHECK_MSG(d < 0, "%s: prompt id %d differs from HF's", name, d);
        CHECK_INT(soft.n, cf_int(o, "n_soft_tokens"));
        int finite = 1;
        float *rows = soft_host(pl, &soft);
        for (size_t i = 0; i < (size_t)soft.n * (size_t)pl->pkg->text.hidden; i++)
            finite &= rows[i] == rows[i] && rows[i] - rows[i] == 0;
        CHECK_MSG(finite, "%s: soft tokens have NaN/inf", name);
        free(rows);
        g4_ids_free(&ids);

        g4_gen_params p;
        g4_gen_params_default(&p);
        p.max_new = cf_int(o, "max_new");
        p.eos = eos, p.n_eos = n_eos;
        g4_gen_result r;
        rc = g4_pipeline_generate(pl, &pr, &p, &r);
        CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
        if (rc == G4_OK) {
            d = cf_first_diff(r.tokens.v, (int)r.tokens.n, want, n_want);
            CHECK_MSG(d < 0,
                      "%s: generated id %d differs from HF's (got %d, want %d; %d vs %d ids)", name,
                      d, d < (int)r.tokens.n ? r.tokens.v[d] : -1, d < n_want ? want[d] : -1,
                      (int)r.tokens.n, n_want);
            CHECK_INT(r.stop, n_want < p.max_new ? G4_STOP_EOS : G4_STOP_MAX_NEW);
            printf(
                "%s: %d prompt ids, %d soft tokens, %d generated ids, stop %s, %.0f ms prefill\n",
                name, r.n_prompt, cf_int(o, "n_soft_tokens"), (int)r.tokens.n,
                g4_stop_reason_name(r.stop), r.prefill_ms);
        }
        g4_gen_result_free(&r);
        free(prompt);
        free(want);
        free(eos);
        free(file);
        n_cases++;
    }
    CHECK_MSG(n_cases >= 3, "only %d media cases", n_cases);

    // a stand-in tower replaces the real one for images, and only for images
    {
        int width = pl->pkg->text.hidden;
        g4_media_encoder_set_towers(pl->media, stand_in_tower, NULL, &width);
        char *img = g4_sprintf("%s/frontends/media/square_rgb.png", dir);
        const char *imgs[1] = {img};
        g4_prompt pr = {.images = imgs, .n_images = 1, .text = "q"};
        g4_ids ids = {0};
        g4_soft_tokens soft = {0};
        CHECK(g4_pipeline_prepare(pl, &pr, &ids, &soft) == G4_OK);
        int all = soft.n == 256; // 96x96 at 280 tokens: 48x48 patches, 256 soft tokens
        float *rows = all ? soft_host(pl, &soft) : NULL;
        for (size_t i = 0; all && i < (size_t)soft.n * width; i++) all = rows[i] == 2304.0f;
        CHECK_MSG(all, "stand-in tower rows did not reach the soft tokens");
        free(rows);
        g4_ids_free(&ids);
        free(img);
    }

    // media errors: a missing file names it; a tokenizer/package placeholder mismatch is caught
    const char *missing[1] = {"/nonexistent/x.png"};
    g4_prompt bad = {.images = missing, .n_images = 1, .text = "q"};
    g4_ids ids = {0};
    g4_soft_tokens soft;
    CHECK(g4_pipeline_prepare(pl, &bad, &ids, &soft) == G4_EUSER);
    CHECK(strstr(g4_error(), "/nonexistent/x.png") != NULL);
    g4_ids_free(&ids);
    g4_pipeline_close(pl);

    char *other = g4_sprintf("%s/tokenizer/gemma_bpe.json", dir); // <|image|> is not 258880
    if (g4_pipeline_open(g4t_env("G4_TINY_PKG"), g4_backend_cpu(), other, &pl) == G4_OK) {
        char *img = g4_sprintf("%s/frontends/media/square_rgb.png", dir);
        const char *imgs[1] = {img};
        g4_prompt pr = {.images = imgs, .n_images = 1, .text = "q"};
        CHECK(g4_pipeline_prepare(pl, &pr, &ids, &soft) == G4_EUSER);
        CHECK(strstr(g4_error(), "placeholder id is 258880") != NULL);
        g4_pipeline_close(pl);
        free(img);
    } else {
        CHECK_MSG(0, "open with gemma_bpe.json: %s", g4_error());
    }
    free(other);
    cf_free(&l);
    free(path);
    free(tok_path);
    return g4t_finish("test_asr_vqa");
}
