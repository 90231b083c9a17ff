// g4cu logits PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] [--backend cpu|cuda]
//                --out F.npy
// Teacher-forced prefill of the ids; writes float32 [seq, vocab] soft-capped logits. With media,
// the image / audio front end and tower make the soft tokens that replace the image / audio
// placeholder ids (the ids must already hold them, expanded as HF's processor does:
// <|image> + n x <|image|> + <image|>; a count mismatch is an error that gives n).
// --image-tokens is the image's soft-token budget (HF's max_soft_tokens: 70, 140, 280, 560 or
// 1120; default the package's image_processor.json).
#include <stdio.h>
#include <stdlib.h>

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

static int cmd_logits(int argc, char **argv) {
    const char *pkg_dir = NULL, *ids_s = NULL, *out = NULL, *backend = "cpu", *image = NULL,
               *audio = NULL;
    long long image_tokens = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image = argv[++i];
        else if (!strcmp(argv[i], "--audio") && i + 1 < argc) audio = argv[++i];
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
        (rc = g4_text_model_load(p, be, &m)) || (rc = g4_text_state_new(m, n, n, &s)))
        goto done;
    g4_mm_towers_init(&tw, p, be);
    if ((rc = media_soft_tokens(&tw, image, image_tokens, audio, &img, &n_img, &aud, &n_aud)) ||
        (rc = g4_mm_merge(&p->text, ids, n, img, n_img, aud, n_aud, &soft)))
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
    g4_mm_soft_free(&soft);
    g4_mm_towers_free(&tw);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc ? g4_cli_fail(rc) : 0;
}

const g4_cmd g4_cmd_logits = {"logits", cmd_logits,
                              "PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] "
                              "[--backend cpu|cuda] --out F.npy   float32 [seq, vocab] logits of "
                              "a teacher-forced prefill (media: soft tokens at the placeholder "
                              "ids)"};
