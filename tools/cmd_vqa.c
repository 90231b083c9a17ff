// g4cu vqa PKG IMAGE QUESTION [options]
// Visual question answering: the image, then the question, in one user turn; the answer
// streams to stdout.
#include <string.h>

#include "tools/cli.h"
#include "tools/gen_cli.h"

static int cmd_vqa(int argc, char **argv) {
    g4_gen_cli o;
    g4_gen_cli_init(&o, "vqa");
    const char *pos[3] = {0};
    int n_pos = 0, code = 1;
    for (int i = 1; i < argc; i++) {
        int r = g4_gen_cli_option(&o, argc, argv, &i);
        if (r < 0) goto done;
        if (r) continue;
        if (argv[i][0] == '-' && argv[i][1]) {
            code = g4_cli_usage_error("vqa", "unknown option '%s' (or it needs a value)", argv[i]);
            goto done;
        } else if (n_pos < 3)
            pos[n_pos++] = argv[i];
        else {
            code = g4_cli_usage_error("vqa", "unexpected argument '%s'", argv[i]);
            goto done;
        }
    }
    if (n_pos < 3) {
        code = g4_cli_usage_error("vqa", "needs PKG, IMAGE and QUESTION");
        goto done;
    }
    const char *images[1] = {pos[1]};
    g4_prompt pr = {
        .system = o.system, .system_as_parts = 1, .images = images, .n_images = 1, .text = pos[2]};
    code = g4_gen_cli_run(&o, pos[0], &pr);
done:
    g4_gen_cli_free(&o);
    return code;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt vqa_opts[] = {
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_vqa = {"vqa", cmd_vqa,
                           "PKG IMAGE QUESTION " G4_GEN_CLI_USAGE "   answer on stdout",
    vqa_opts, g4_gen_cli_opts};
