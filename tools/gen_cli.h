// gen_cli.h: what the generate, asr and vqa commands share: the generation options, running a
// request on the public API (include/g4cu.h), and printing the result (streamed text, or --json).
#ifndef G4_GEN_CLI_H
#define G4_GEN_CLI_H

#include <g4cu.h>

#include "tools/cli.h"

#define G4_GEN_CLI_MAX_LIST 64

typedef struct {
    const char *cmd;       // command name for messages
    const char *backend;   // --backend (cpu)
    const char *tokenizer; // --tokenizer F
    const char *system;    // --system S (sent as text parts, as the eval harness does)
    int json;              // --json
    int ple_host;          // --ple-host: per-layer embedding table in pinned host memory
    g4cu_request rq;       // --max-new, the sampling options, --ignore-eos, --prefill-chunk
    char *stop[G4_GEN_CLI_MAX_LIST]; // --stop S (escapes decoded)
    int n_stop;
    char *ignore[G4_GEN_CLI_MAX_LIST]; // --ignore-stop S
    int n_ignore;
    int32_t eos[G4_GEN_CLI_MAX_LIST]; // --eos ID
    int n_eos;
    const char *sampling_opt; // the first of --top-k / --top-p / --seed given (NULL: none)
    int seed_given;           // --seed N (else a sampling run draws one: g4_gen_cli_open)
} g4_gen_cli;

// The options every generating command takes, for the usage lines.
#define G4_GEN_CLI_USAGE                                                                           \
    "[--max-new N] [--stop S]... [--ignore-stop S]... [--eos ID]... [--ignore-eos] "               \
    "[--temperature T --top-k K --top-p P --seed N] [--system S] [--backend cpu|cuda "             \
    "[--ple-host]] "                                                                               \
    "[--tokenizer F] [--json]"

// The shared options with their defaults: the parser's list and the help's (tools/cli.h).
extern const g4_opt g4_gen_cli_opts[];

void g4_gen_cli_init(g4_gen_cli *o, const char *cmd);
void g4_gen_cli_free(g4_gen_cli *o);
// Consumes argv[*i] (and its value) when it is a shared option: returns 1 when it was one, 0
// when it is not, -1 after printing a usage error.
int g4_gen_cli_option(g4_gen_cli *o, int argc, char **argv, int *i);

// Loads the model and its state (text_only: g4cu_model_params' text_only, for --ids) after
// checking the options; returns the exit code: 0, or 1 / 2 after printing.
int g4_gen_cli_open(g4_gen_cli *o, const char *pkg_dir, int text_only, g4cu_model **m,
                    g4cu_state **s);
// The request the options give (valid while o is), with the system turn and the text streamed
// to stdout unless --json; the caller adds the prompt (text, media).
void g4_gen_cli_request(const g4_gen_cli *o, g4cu_request *rq);
// Runs rq on s and prints: the text streamed to stdout as it is made (then a newline), or with
// --json one JSON object (text, tokens, prompt_tokens, stop_reason, stop_token, stop_string,
// max_new, timings, audio_truncated), then the audio cut to the tower's window on stderr.
// Returns the exit code.
int g4_gen_cli_run_on(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq);
// open + one request of the options with these media and text + close.
int g4_gen_cli_run(g4_gen_cli *o, const char *pkg_dir, const g4cu_media *media, int n_media,
                   const char *text);

// One input of a batch (asr's files, vqa --batch's lines): its medium and text, the name its
// results and errors carry, its id (a JSON value copied into its line, or NULL), and an error
// found while reading it (then it is not run).
typedef struct {
    g4cu_media media;
    const char *text;
    const char *input;
    const struct cJSON *id;
    const char *error;
} g4_gen_cli_item;

// The model loaded once, then each item in turn: text mode prints "==> input <==" and the
// streamed text; --json one line per item (the g4_gen_cli_run_on object with "input" and "id"
// first). A failing item is said on stderr ("g4cu CMD: input: why") and, with --json, in its
// line as {"input", "id", "error"}; the rest go on. Returns 0, or 1 (2) when an item failed
// with a user (internal) error.
int g4_gen_cli_run_batch(g4_gen_cli *o, const char *pkg_dir, const g4_gen_cli_item *items,
                         int n);

// The same for prompt token ids given directly (no chat template, no media; the tokenizer is
// optional: without one the ids are printed instead of the text).
int g4_gen_cli_run_ids(g4_gen_cli *o, const char *pkg_dir, const int32_t *ids, int n);

#endif
