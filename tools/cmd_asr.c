// g4cu asr PKG AUDIO... [--prompt P] [options]
// Speech recognition: the audio, then the prompt, in one user turn; the transcript streams to
// stdout. Several files are transcribed in turn with the model loaded once (tools/gen_cli.h
// g4_gen_cli_run_batch: "==> file <==" before each, or one JSON line each with --json; a
// failing file is reported and the rest go on). The default prompt is the E2B model card's ASR prompt (spec gemma4-architecture.md
// 6.2); the LibriSpeech benchmark uses "Please recognize the speech and only output the
// recognized content:" (eval-metrics.md), which --prompt can give.
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/gen_cli.h"

#define G4_ASR_PROMPT                                                                              \
    "Transcribe the following speech segment in its original language. Follow these specific "     \
    "instructions for formatting the answer:\n* Only output the transcription, with no "           \
    "newlines.\n* When transcribing numbers, write the digits, i.e. write 1.7 and not one point "  \
    "seven, and write 3 instead of three."

static int cmd_asr(int argc, char **argv) {
    g4_gen_cli o;
    g4_gen_cli_init(&o, "asr");
    const char **pos = g4_calloc((size_t)argc, sizeof(char *)), *prompt = G4_ASR_PROMPT;
    int n_pos = 0, code = 1;
    for (int i = 1; i < argc; i++) {
        int r = g4_gen_cli_option(&o, argc, argv, &i);
        if (r < 0) goto done;
        if (r) continue;
        if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = argv[++i];
        else if (argv[i][0] == '-') {
            code = g4_cli_usage_error("asr", "unknown option '%s' (or it needs a value)", argv[i]);
            goto done;
        } else
            pos[n_pos++] = argv[i];
    }
    if (n_pos < 2) {
        code = g4_cli_usage_error("asr", "needs PKG and AUDIO");
        goto done;
    }
    if (n_pos == 2) {
        g4_prompt pr = {.system = o.system,
                        .system_as_parts = 1,
                        .audio = &pos[1],
                        .n_audio = 1,
                        .text = prompt};
        code = g4_gen_cli_run(&o, pos[0], &pr);
    } else {
        g4_gen_cli_item *items = g4_calloc((size_t)n_pos, sizeof *items);
        for (int k = 1; k < n_pos; k++)
            items[k - 1] = (g4_gen_cli_item){.prompt = {.system = o.system,
                                                        .system_as_parts = 1,
                                                        .audio = &pos[k],
                                                        .n_audio = 1,
                                                        .text = prompt},
                                             .input = pos[k]};
        code = g4_gen_cli_run_batch(&o, pos[0], items, n_pos - 1);
        free(items);
    }
done:
    g4_gen_cli_free(&o);
    free(pos);
    return code;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt asr_opts[] = {
    {"--prompt", "P", "the instruction after the audio (default: the E2B model card's ASR prompt)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_asr = {"asr", cmd_asr,
                           "PKG AUDIO... [--prompt P] " G4_GEN_CLI_USAGE
                           "   transcript on stdout (default prompt: the E2B ASR prompt); several files: one "
                           "result each, the model loaded once",
    asr_opts, g4_gen_cli_opts};
