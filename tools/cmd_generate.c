// g4cu generate PKG --prompt T|- [--image F]... [--audio F]... [options]   (-: read stdin)
// g4cu generate PKG --ids 2,5,17 [options]
// A chat-template prompt (one user turn: images, then audio, then the text) or raw prompt ids,
// then generation; the text streams to stdout (or --json prints tokens, timings and the stop
// reason). Options are listed in tools/gen_cli.h.
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/gen_cli.h"

#define MAX_MEDIA 16

static int cmd_generate(int argc, char **argv) {
    g4_gen_cli o;
    g4_gen_cli_init(&o, "generate");
    const char *pkg_dir = NULL, *prompt = NULL, *ids_s = NULL;
    g4cu_media media[2 * MAX_MEDIA]; // the files, images and audio in the order given
    int n_images = 0, n_audio = 0, code = 1;
    for (int i = 1; i < argc; i++) {
        int r = g4_gen_cli_option(&o, argc, argv, &i);
        if (r < 0) goto done;
        if (r) continue;
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--prompt") && has_value)
            prompt = argv[++i];
        else if (!strcmp(a, "--ids") && has_value)
            ids_s = argv[++i];
        else if ((!strcmp(a, "--image") || !strcmp(a, "--audio")) && has_value) {
            int img = !strcmp(a, "--image");
            if ((img ? n_images : n_audio) == MAX_MEDIA) {
                code = g4_cli_usage_error("generate", "more than %d %s files", MAX_MEDIA, a);
                goto done;
            }
            n_images += img, n_audio += !img;
            media[n_images + n_audio - 1] =
                (g4cu_media){.kind = img ? G4CU_IMAGE_FILE : G4CU_AUDIO_FILE, .path = argv[++i]};
        } else if (a[0] == '-') {
            code = g4_cli_usage_error("generate", "unknown option '%s' (or it needs a value)", a);
            goto done;
        } else if (!pkg_dir)
            pkg_dir = a;
        else {
            code = g4_cli_usage_error("generate", "unexpected argument '%s'", a);
            goto done;
        }
    }
    if (!pkg_dir) {
        code = g4_cli_usage_error("generate", "missing package directory");
        goto done;
    }
    if (ids_s) {
        if (prompt || n_images || n_audio || o.system) {
            code = g4_cli_usage_error("generate",
                                      "--ids is the whole prompt: no --prompt, --image, --audio "
                                      "or --system with it");
            goto done;
        }
        int32_t *ids;
        int n, rc = g4_cli_parse_ids(ids_s, &ids, &n);
        if (rc) {
            code = g4_cli_fail(rc);
            goto done;
        }
        code = g4_gen_cli_run_ids(&o, pkg_dir, ids, n);
        free(ids);
        goto done;
    }
    if (!prompt && !n_images && !n_audio) {
        code = g4_cli_usage_error("generate", "needs --prompt (and/or --image, --audio) or --ids");
        goto done;
    }
    char *stdin_text = NULL; // --prompt -: the prompt is stdin's text, as `tokenize -` reads it
    if (prompt && !strcmp(prompt, "-")) {
        int rc = g4_read_fd(0, "stdin", G4_MAX_TEXT_BYTES, &stdin_text, NULL);
        if (rc) {
            code = g4_cli_fail(rc);
            goto done;
        }
        prompt = stdin_text;
    }
    code = g4_gen_cli_run(&o, pkg_dir, media, n_images + n_audio, prompt);
    free(stdin_text);
done:
    g4_gen_cli_free(&o);
    return code;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt generate_opts[] = {
    {"--prompt", "T", "the user turn; - reads stdin (default: none; --prompt or --ids is needed)"},
    {"--ids", "I,..", "raw prompt token ids, no chat template (instead of --prompt)"},
    {"--image", "F", "an image before the prompt (repeatable; default: none)"},
    {"--audio", "F", "an audio file before the prompt (repeatable; default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_generate = {
    "generate", cmd_generate,
    "PKG --prompt T|- [--image F]... [--audio F]... | --ids 2,5,17   " G4_GEN_CLI_USAGE
    "   chat-template prompt (or raw ids; --prompt - reads stdin) -> generated text on stdout",
    generate_opts, g4_gen_cli_opts};
