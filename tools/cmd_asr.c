// g4cu asr PKG AUDIO... [--prompt P] [options]
// Speech recognition: the audio, then the prompt, in one user turn; the transcript streams to
// stdout. Several files are transcribed in turn with the model loaded once (tools/gen_cli.h
// g4_gen_cli_run_batch: "==> file <==" before each, or one JSON line each with --json; a
// failing file is reported and the rest go on). One file longer than the audio tower's window
// (or --srt / --vtt) is transcribed in overlapping windows and stitched (g4cu_transcribe_long:
// the rule), printed as text, --json segments, SubRip or WebVTT (tools/asr_long.h).
// The default prompt is the E2B model card's ASR prompt (spec gemma4-architecture.md 6.2);
// the LibriSpeech benchmark uses "Please recognize the speech and only output the recognized
// content:" (eval-metrics.md), which --prompt can give.
#include <stdlib.h>
#include <string.h>

#include "tools/asr_long.h"
#include "tools/cli.h"
#include "tools/gen_cli.h"

// One file: long-form when it is longer than the tower's window or cues are asked for.
static int asr_one(g4_gen_cli *o, const char *pkg, const char *path, const char *prompt,
                   g4_asr_format cues) {
    g4cu_model *m;
    g4cu_state *s;
    int code = g4_gen_cli_open(o, pkg, 0, &m, &s);
    if (code) return code;
    float *pcm = NULL;
    size_t n = 0;
    // An unreadable file goes the one-window way, which reports it as it always has.
    const int loaded = g4cu_model_has_audio(m) && !g4cu_audio_load(m, path, &pcm, &n);
    g4cu_request rq;
    g4_gen_cli_request(o, &rq);
    rq.text = prompt;
    if (loaded && (n > g4cu_model_audio_window(m) || cues != G4_ASR_TEXT)) {
        const g4_asr_format f = cues != G4_ASR_TEXT ? cues : o->json ? G4_ASR_JSON : G4_ASR_TEXT;
        int rc = g4_asr_long(o, s, &rq, path, pcm, n, g4cu_model_audio_rate(m), f);
        code = rc ? g4_cli_fail(rc) : 0;
    } else {
        const g4cu_media audio = {.kind = G4CU_AUDIO_FILE, .path = path};
        rq.media = &audio;
        rq.n_media = 1;
        code = g4_gen_cli_run_on(o, s, &rq);
    }
    g4cu_free(pcm);
    g4cu_state_free(s);
    g4cu_model_free(m);
    return code;
}

static int cmd_asr(int argc, char **argv) {
    g4_gen_cli o;
    g4_gen_cli_init(&o, "asr");
    const char **pos = g4_calloc((size_t)argc, sizeof(char *)), *prompt = g4cu_asr_prompt();
    int n_pos = 0, code = 1;
    g4_asr_format cues = G4_ASR_TEXT;
    for (int i = 1; i < argc; i++) {
        int r = g4_gen_cli_option(&o, argc, argv, &i);
        if (r < 0) goto done;
        if (r) continue;
        if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--srt") || !strcmp(argv[i], "--vtt")) {
            const g4_asr_format f = !strcmp(argv[i], "--srt") ? G4_ASR_SRT : G4_ASR_VTT;
            if (cues != G4_ASR_TEXT && cues != f) {
                code = g4_cli_usage_error("asr", "--srt and --vtt exclude each other");
                goto done;
            }
            cues = f;
        }
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
    if (cues != G4_ASR_TEXT && (n_pos != 2 || o.json)) {
        code = g4_cli_usage_error("asr", "--srt / --vtt take one AUDIO file and no --json");
        goto done;
    }
    if (n_pos == 2) {
        code = asr_one(&o, pos[0], pos[1], prompt, cues);
    } else {
        g4_gen_cli_item *items = g4_calloc((size_t)n_pos, sizeof *items);
        for (int k = 1; k < n_pos; k++)
            items[k - 1] = (g4_gen_cli_item){.media = {.kind = G4CU_AUDIO_FILE, .path = pos[k]},
                                             .text = prompt,
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
    {"--srt", NULL, "SubRip cues of at most ~7 s, split at sentences and pauses (long-form)"},
    {"--vtt", NULL, "WebVTT cues, as --srt (long-form; not with --srt)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_asr = {"asr", cmd_asr,
                           "PKG AUDIO... [--prompt P] [--srt | --vtt] " G4_GEN_CLI_USAGE
                           "   transcript on stdout (default prompt: the E2B ASR prompt); "
                           "several files: one result each, the model loaded once",
    asr_opts, g4_gen_cli_opts};
