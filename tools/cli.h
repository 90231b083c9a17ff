// cli.h: the g4cu subcommand type and small argument helpers shared by tools/cmd_*.c.
// A command lives in tools/cmd_<name>.c and defines `const g4_cmd g4_cmd_<name>`.
// Exit codes: 0 success, 1 user error (one line on stderr), 2 internal error.
#ifndef G4_CLI_H
#define G4_CLI_H

#include <stdio.h>

#include "base/base.h"

typedef int (*g4_cmd_fn)(int argc, char **argv);

// One option a command accepts: what `g4cu COMMAND --help` prints and what the command line is
// checked against before the command's parser runs (tools/cli_help.c), so an option missing
// from the table is refused rather than left out of the help. Tables end with {NULL}.
typedef struct {
    const char *name;  // "--max-new"
    const char *value; // what it takes ("N"); NULL: a flag
    const char *help;  // one sentence, with the default
} g4_opt;

typedef struct {
    const char *name;
    g4_cmd_fn run;
    const char *usage;    // one line: arguments and options
    const g4_opt *opts;   // the command's options (NULL: not checked, --help prints usage only)
    const g4_opt *shared; // a second table (the generation options of tools/gen_cli.h) or NULL
} g4_cmd;

// Before a command runs: `--help` / `-h` anywhere prints its help (exit 0); an option in
// neither of its tables nor the global ones is a usage error (exit 1). Returns -1 to go on,
// else the exit code.
int g4_cli_prepare(const g4_cmd *c, int argc, char **argv);
// Prints the command's usage and options, in lines under 100 characters.
void g4_cli_help(FILE *f, const g4_cmd *c);
// `g4cu --version`: version, git commit, the CUDA runtime and cuBLAS it was built with.
int g4_cli_version(void);
// The options every command takes (tools/cli_global.c).
extern const g4_opt g4_cli_global_opts[];

// Prints "g4cu: <g4_error()>" and returns the exit code for a library return code.
int g4_cli_fail(int rc);
// Prints "g4cu <cmd>: <message>" for a usage error and returns 1.
int g4_cli_usage_error(const char *cmd, const char *fmt, ...) G4_PRINTF(2, 3);
// Parses a decimal int option value; on error prints and returns 0.
int g4_cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
               long long *out);

// The options of every command (tools/cli_global.c): G4_THREADS, then --threads N anywhere after
// the command name (taken out of argv), set the CPU backend's threads (default: all cores).
// Returns 0 after printing a usage error.
int g4_cli_global_options(int *argc, char **argv);

// Writes s[0, n) as a JSON string: quotes, backslashes and control bytes (NUL too) escaped, an
// invalid UTF-8 byte written as U+FFFD (tools/cli_json.c).
void g4_cli_json_string(FILE *f, const char *s, size_t n);

// "2,5,17" -> a new array of ids (--ids of logits, compare and generate); one-line errors.
int g4_cli_parse_ids(const char *s, int32_t **ids, int *n);

#endif
