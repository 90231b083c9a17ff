// g4cu logits PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] [--backend cpu|cuda]
//                --out F.npy
// Teacher-forced prefill of the ids; writes float32 [seq, vocab] soft-capped logits. With media,
// the image / audio front end and tower make the soft tokens that replace the image / audio
// placeholder ids. One placeholder id of a kind, alone (not between <|image> and <image|>),
// stands for the whole block, as the chat template's one <|image|> does: it is expanded as HF's
// processor (and generate) expands it, to <|image> + n x <|image|> + <image|> (the same for
// audio), the begin / end ids from the tokenizer (--tokenizer, default the package's). Ids that
// already hold the n placeholders are used as they are; any other count is an error that gives n.
// --image-tokens is the image's soft-token budget (HF's max_soft_tokens: 70, 140, 280, 560 or
// 1120; default the package's image_processor.json).
#include <stdio.h>
#include <stdlib.h>

#include "engine/chat.h"
#include "engine/multimodal.h"
#include "engine/text_model.h"
#include "fidelity/npy.h"
#include "kernels/backend_select.h"
#include "tools/cli.h"

// The soft tokens of the image and audio files (either may be NULL).
static int media_soft_tokens(g4_mm_towers *tw, const char *image, long long image_tokens,
                             const char *audio, float **img, int *n_img, float **aud,
                             int *n_aud) {
    const g4_package *p = tw->pkg;
    const int H = p->text.hidden;
    int rc = G4_OK;
    if (image) {
        if (!g4_package_component(p, G4_COMP_VISION) || !p->has_image_proc)
            return g4_fail(G4_EUSER, "%s: the package %s has no vision encoder (or "
                           "image_processor.json)", image, p->dir);
        g4_image_proc_config ic = p->image_proc;
        if (image_tokens > 0) ic.max_soft_tokens = (int)image_tokens;
        g4_image_features f;
        if ((rc = g4_image_features_load(&ic, image, &f))) return rc;
        *n_img = f.n_soft_tokens;
        *img = g4_malloc(sizeof(float) * (size_t)(f.n_soft_tokens + 1) * H);
        if ((rc = g4_mm_image_tower(tw, &f, *img))) g4_error_prefix("%s", image);
        g4_image_features_free(&f);
        if (rc) return rc;
    }
    if (audio) {
        if (!g4_package_component(p, G4_COMP_AUDIO) || !p->has_audio_fe)
            return g4_fail(G4_EUSER, "%s: the package %s has no audio encoder (or "
                           "audio_feature_extraction.json)", audio, p->dir);
        g4_audio_features f;
        if ((rc = g4_audio_features_load(&p->audio_fe, audio, &f))) return rc;
        *n_aud = f.n_soft_tokens;
        *aud = g4_malloc(sizeof(float) * (size_t)(f.n_soft_tokens + 1) * H);
        if ((rc = g4_mm_audio_tower(tw, &f, *aud))) g4_error_prefix("%s", audio);
        g4_audio_features_free(&f);
    }
    return rc;
}

// The index of the one placeholder `ph` in ids[n] when it stands alone (not already between
// `begin` and `end`), else -1.
static int lone_placeholder(const int32_t *ids, int n, int ph, int begin, int end) {
    int at = -1, count = 0;
    for (int t = 0; t < n; t++)
        if (ids[t] == ph) at = t, count++;
    if (count != 1) return -1;
    if (at > 0 && at + 1 < n && ids[at - 1] == begin && ids[at + 1] == end) return -1;
    return at;
}

// Expands a lone image / audio placeholder of *ids into begin + count x placeholder + end.
static int expand_placeholders(const g4_text_config *c, const char *pkg_dir, const char *tok_path,
                               int n_img, int n_aud, int32_t **ids, int *n) {
    const int kinds[2][2] = {{c->image_token_id, n_img}, {c->audio_token_id, n_aud}};
    int need = 0;
    for (int k = 0; k < 2; k++)
        need |= kinds[k][1] > 0 && kinds[k][0] >= 0 &&
                lone_placeholder(*ids, *n, kinds[k][0], -2, -2) >= 0;
    if (!need) return G4_OK;
    char *path = tok_path ? g4_strdup(tok_path) : g4_path_join(pkg_dir, "tokenizer.json");
    g4_tokenizer *tok = NULL;
    g4_chat_tokens ct;
    int rc = G4_OK;
    if (!tok_path && !g4_is_file(path))
        rc = g4_fail(G4_EUSER,
                     "%s: the package has no tokenizer.json for the media's begin / end ids; "
                     "pass one with --tokenizer F (or give the expanded placeholder ids)",
                     pkg_dir);
    if (!rc && !(rc = g4_tokenizer_open(path, &tok))) rc = g4_chat_tokens_find(tok, path, &ct);
    for (int k = 0; k < 2 && !rc; k++) {
        const int ph = kinds[k][0], count = kinds[k][1];
        const int tok_ph = k ? ct.audio : ct.image, begin = k ? ct.boa : ct.boi,
                  end = k ? ct.eoa : ct.eoi;
        const char *name = k ? "<|audio|>" : "<|image|>";
        int at = count > 0 && ph >= 0 ? lone_placeholder(*ids, *n, ph, begin, end) : -1;
        if (at < 0) continue;
        if (tok_ph != ph || begin < 0 || end < 0) {
            rc = g4_fail(G4_EUSER,
                         "%s: '%s' is id %d and its begin / end ids %d / %d, but the package's "
                         "placeholder id is %d",
                         path, name, tok_ph, begin, end, ph);
            break;
        }
        // [0, at) + begin + count x ph + end + (at, n)
        const int m = *n - 1 + count + 2;
        int32_t *out = g4_malloc(sizeof(int32_t) * (size_t)m);
        memcpy(out, *ids, sizeof(int32_t) * (size_t)at);
        out[at] = begin;
        for (int i = 0; i < count; i++) out[at + 1 + i] = ph;
        out[at + 1 + count] = end;
        memcpy(out + at + 2 + count, *ids + at + 1, sizeof(int32_t) * (size_t)(*n - at - 1));
        free(*ids);
        *ids = out;
        *n = m;
    }
    g4_tokenizer_close(tok);
    free(path);
    return rc;
}

static int cmd_logits(int argc, char **argv) {
    const char *pkg_dir = NULL, *ids_s = NULL, *out = NULL, *backend = "cpu", *image = NULL,
               *audio = NULL, *tok_path = NULL;
    long long image_tokens = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image = argv[++i];
        else if (!strcmp(argv[i], "--audio") && i + 1 < argc) audio = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--image-tokens")) {
            if (!g4_cli_int("logits", "--image-tokens", i + 1 < argc ? argv[++i] : NULL, 1,
                            1 << 20, &image_tokens))
                return 1;
        } else if (argv[i][0] == '-') return g4_cli_usage_error("logits", "unknown option '%s'", argv[i]);
        else if (!pkg_dir) pkg_dir = argv[i];
        else return g4_cli_usage_error("logits", "unexpected argument '%s'", argv[i]);
    }
    if (!pkg_dir || !ids_s || !out)
        return g4_cli_usage_error("logits", "needs PKG, --ids and --out");
    if (image_tokens && !image) return g4_cli_usage_error("logits", "--image-tokens needs --image");
    int32_t *ids;
    int n, rc, n_img = 0, n_aud = 0;
    if ((rc = g4_check_output(out))) return g4_cli_fail(rc); // before the work, not after it
    if ((rc = g4_cli_parse_ids(ids_s, &ids, &n))) return g4_cli_fail(rc);
    g4_backend *be;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    g4_mm_towers tw = {0};
    g4_soft_tokens soft = {0};
    float *logits = NULL, *img = NULL, *aud = NULL;
    if ((rc = g4_backend_by_name(backend, &be)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    g4_mm_towers_init(&tw, p, be);
    // The media first: their soft-token counts size the prompt (and so the state).
    if ((rc = media_soft_tokens(&tw, image, image_tokens, audio, &img, &n_img, &aud, &n_aud)) ||
        (rc = expand_placeholders(&p->text, pkg_dir, tok_path, n_img, n_aud, &ids, &n)) ||
        (rc = g4_text_state_new(m, n, n, &s)) ||
        (rc = g4_mm_merge(be, &p->text, ids, n, img, n_img, aud, n_aud, &soft)))
        goto done;
    logits = g4_malloc(sizeof(float) * (size_t)n * p->text.vocab);
    if ((rc = g4_text_forward(s, ids, n, &soft, logits, 1))) goto done;
    int64_t shape[2] = {n, p->text.vocab};
    rc = g4_npy_write(out, G4_DT_FLOAT, 2, shape, logits);
done:
    free(ids);
    free(logits);
    free(img);
    free(aud);
    g4_mm_soft_free(be, &soft);
    g4_mm_towers_free(&tw);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt logits_opts[] = {
    {"--ids", "I,..", "the prompt token ids (required)"},
    {"--out", "F.npy", "where the float32 [seq, vocab] logits go (required)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--image", "F", "an image whose soft tokens go at the image placeholder ids"},
    {"--image-tokens", "N", "--image: soft tokens per image (default: the package's)"},
    {"--audio", "F", "an audio file whose soft tokens go at the audio placeholder ids"},
    {"--tokenizer", "F", "media: where a lone placeholder's begin / end ids come from (default: "
                         "the package's)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_logits = {"logits", cmd_logits,
                              "PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] "
                              "[--tokenizer F] [--backend cpu|cuda] --out F.npy   float32 [seq, vocab] logits of "
                              "a teacher-forced prefill (media: soft tokens at the placeholder "
                              "ids; one placeholder id is expanded as generate does)",
    logits_opts, NULL};
