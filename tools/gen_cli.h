// gen_cli.h: what the generate, asr and vqa commands share: the generation options, running a
// request through the pipeline, and printing the result (streamed text, or --json).
#ifndef G4_GEN_CLI_H
#define G4_GEN_CLI_H

#include "engine/pipeline.h"
#include "tools/cli.h"

#define G4_GEN_CLI_MAX_LIST 64

typedef struct {
    const char *cmd;       // command name for messages
    const char *backend;   // --backend (cpu)
    const char *tokenizer; // --tokenizer F
    const char *system;    // --system S (sent as text parts, as the eval harness does)
    int json;              // --json
    int ple_host;          // --ple-host: per-layer embedding table in pinned host memory
    g4_gen_params gen;
    char *stop[G4_GEN_CLI_MAX_LIST]; // --stop S (escapes decoded)
    int n_stop;
    char *ignore[G4_GEN_CLI_MAX_LIST]; // --ignore-stop S
    int n_ignore;
    int eos[G4_GEN_CLI_MAX_LIST]; // --eos ID
    int n_eos;
    const char *sampling_opt; // the first of --top-k / --top-p / --seed given (NULL: none)
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

// Opens the pipeline, runs the prompt and prints: the text streamed to stdout as it is made
// (then a newline), or with --json one JSON object (text, tokens, prompt_tokens, stop_reason,
// stop_token, stop_string, max_new, timings). Returns the process exit code.
int g4_gen_cli_run(g4_gen_cli *o, const char *pkg_dir, const g4_prompt *pr);
// The pieces of g4_gen_cli_run, for commands that run more than one request: the option check
// and the pipeline (returns the exit code: 0, or 1 / 2 after printing), one request on it
// (printed as g4_gen_cli_run prints; returns the exit code), and the generation parameters the
// options give (valid while o is).
int g4_gen_cli_open(g4_gen_cli *o, const char *pkg_dir, g4_pipeline **pl);
int g4_gen_cli_run_on(g4_gen_cli *o, g4_pipeline *pl, const g4_prompt *pr);
void g4_gen_cli_params(g4_gen_cli *o, g4_gen_params *p);

// One input of a batch (asr's files, vqa --batch's lines): its prompt, the name its results
// and errors carry, its id (a JSON value copied into its line, or NULL), and an error found
// while reading it (then it is not run).
typedef struct {
    g4_prompt prompt;
    const char *input;
    const struct cJSON *id;
    const char *error;
} g4_gen_cli_item;

// The model loaded once, then each item in turn: text mode prints "==> input <==" and the
// streamed text; --json one line per item (the g4_gen_cli_run object with "input" and "id"
// first). A failing item is said on stderr ("g4cu CMD: input: why") and, with --json, in its
// line as {"input", "id", "error"}; the rest go on. Returns 0, or 1 (2) when an item failed
// with a user (internal) error.
int g4_gen_cli_run_batch(g4_gen_cli *o, const char *pkg_dir, const g4_gen_cli_item *items,
                         int n);

// The same for prompt token ids given directly (no chat template, no media).
int g4_gen_cli_run_ids(g4_gen_cli *o, const char *pkg_dir, const int32_t *ids, int n);

#endif
