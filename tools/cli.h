// cli.h: the g4cu subcommand type and small argument helpers shared by tools/cmd_*.c.
// A command lives in tools/cmd_<name>.c and defines `const g4_cmd g4_cmd_<name>`.
// Exit codes: 0 success, 1 user error (one line on stderr), 2 internal error.
#ifndef G4_CLI_H
#define G4_CLI_H

#include "base/base.h"

typedef int (*g4_cmd_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    g4_cmd_fn run;
    const char *usage; // one line: arguments and options
} g4_cmd;


// Prints "g4cu: <g4_error()>" and returns the exit code for a library return code.
int g4_cli_fail(int rc);
// Prints "g4cu <cmd>: <message>" for a usage error and returns 1.
int g4_cli_usage_error(const char *cmd, const char *fmt, ...) G4_PRINTF(2, 3);
// Parses a decimal int option value; on error prints and returns 0.
int g4_cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
               long long *out);

// "2,5,17" -> a new array of ids (--ids of logits, compare and generate); one-line errors.
int g4_cli_parse_ids(const char *s, int32_t **ids, int *n);

#endif
