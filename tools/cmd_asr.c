// g4cu asr PKG AUDIO [--prompt P] [options]
// Speech recognition: the audio, then the prompt, in one user turn; the transcript streams to
// stdout. The default prompt is the E2B model card's ASR prompt (spec gemma4-architecture.md
// 6.2); the LibriSpeech benchmark uses "Please recognize the speech and only output the
// recognized content:" (eval-metrics.md), which --prompt can give.
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
    const char *pos[2] = {0}, *prompt = G4_ASR_PROMPT;
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
        } else if (n_pos < 2)
            pos[n_pos++] = argv[i];
        else {
            code = g4_cli_usage_error("asr", "unexpected argument '%s'", argv[i]);
            goto done;
        }
    }
    if (n_pos < 2) {
        code = g4_cli_usage_error("asr", "needs PKG and AUDIO");
        goto done;
    }
    const char *audio[1] = {pos[1]};
    g4_prompt pr = {
        .system = o.system, .system_as_parts = 1, .audio = audio, .n_audio = 1, .text = prompt};
    code = g4_gen_cli_run(&o, pos[0], &pr);
done:
    g4_gen_cli_free(&o);
    return code;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt asr_opts[] = {
    {"--prompt", "P", "the instruction after the audio (default: the E2B model card's ASR prompt)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_asr = {"asr", cmd_asr,
                           "PKG AUDIO [--prompt P] " G4_GEN_CLI_USAGE
                           "   transcript on stdout (default prompt: the E2B ASR prompt)",
    asr_opts, g4_gen_cli_opts};
