// g4cu: the command. `g4cu <command> ...`; see DESIGN.md "Command contract".
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

static const g4_cmd commands[] = {
    {"inspect", g4_cmd_inspect,
     "PKG [--tensor NAME] [--summary]   components, tensors, dtypes, derived config; checks all"},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

int g4_cli_fail(int rc) {
    fprintf(stderr, "g4cu: %s\n", g4_error());
    return rc == G4_EINTERNAL ? 2 : 1;
}

int g4_cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "g4cu %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see g4cu help)\n");
    va_end(ap);
    return 1;
}

int g4_cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
               long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        g4_cli_usage_error(cmd, "%s expects an integer in [%lld, %lld], got '%s'", opt, lo, hi,
                           s ? s : "");
        return 0;
    }
    *out = v;
    return 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: g4cu <command> [args]\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].usage);
    fprintf(f, "\nexit codes: 0 ok, 1 bad input or usage, 2 internal error\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    for (int i = 0; i < n_commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "g4cu: unknown command '%s' (see g4cu help)\n", argv[1]);
    return 1;
}
