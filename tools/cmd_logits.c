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
// On the public C API (include/g4cu_eval.h: g4cu_eval_logits, g4cu_eval_write_npy).
#include <g4cu_eval.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/cli.h"

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
    int n, rc;
    if ((rc = g4_check_output(out))) return g4_cli_fail(rc); // before the work, not after it
    if ((rc = g4_cli_parse_ids(ids_s, &ids, &n))) return g4_cli_fail(rc);
    g4cu_eval_logits_params lp;
    g4cu_eval_logits_params_default(&lp);
    lp.backend = backend;
    lp.tokenizer = tok_path;
    lp.image = image;
    lp.image_tokens = (int)image_tokens;
    lp.audio = audio;
    float *logits = NULL; // [rows, vocab]
    int rows, vocab;
    rc = g4cu_eval_logits(pkg_dir, ids, n, &lp, &logits, &rows, &vocab);
    if (!rc) rc = g4cu_eval_write_npy(out, logits, rows, vocab);
    free(ids);
    g4cu_free(logits);
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
