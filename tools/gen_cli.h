// gen_cli.h: what the generate, asr and vqa commands share: the generation options, running a
// request through the pipeline, and printing the result (streamed text, or --json).
#ifndef G4_GEN_CLI_H
#define G4_GEN_CLI_H

#include "engine/pipeline.h"

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
    "[--max-new N] [--stop S]... [--ignore-stop S]... [--eos ID]... [--temperature T "             \
    "--top-k K --top-p P --seed N] [--system S] [--backend cpu|cuda [--ple-host]] [--tokenizer F] [--json]"

void g4_gen_cli_init(g4_gen_cli *o, const char *cmd);
void g4_gen_cli_free(g4_gen_cli *o);
// Consumes argv[*i] (and its value) when it is a shared option: returns 1 when it was one, 0
// when it is not, -1 after printing a usage error.
int g4_gen_cli_option(g4_gen_cli *o, int argc, char **argv, int *i);

// Opens the pipeline, runs the prompt and prints: the text streamed to stdout as it is made
// (then a newline), or with --json one JSON object (text, tokens, prompt_tokens, stop_reason,
// stop_token, stop_string, max_new, timings). Returns the process exit code.
int g4_gen_cli_run(g4_gen_cli *o, const char *pkg_dir, const g4_prompt *pr);
// The same for prompt token ids given directly (no chat template, no media).
int g4_gen_cli_run_ids(g4_gen_cli *o, const char *pkg_dir, const int32_t *ids, int n);

#endif
