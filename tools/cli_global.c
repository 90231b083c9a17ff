// cli_global.c: the options every command takes, read before the command's own parser sees
// argv: --threads N (and G4_THREADS), the CPU backend's thread count (base/parallel.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parallel.h"
#include "tools/cli.h"

#define G4_CLI_MAX_THREADS 1024

const g4_opt g4_cli_global_opts[] = {
    {"--threads", "N", "CPU backend threads, 1 to 1024 (default: $G4_THREADS, else all cores)"},
    {NULL, NULL, NULL}};

int g4_cli_global_options(int *argc, char **argv) {
    const char *cmd = *argc > 1 ? argv[1] : "g4cu";
    const char *env = getenv("G4_THREADS");
    long long n;
    if (env && *env) {
        if (!g4_cli_int(cmd, "G4_THREADS", env, 1, G4_CLI_MAX_THREADS, &n)) return 0;
        g4_set_threads((int)n);
    }
    int w = 2; // argv[0] is g4cu, argv[1] the command
    for (int i = 2; i < *argc; i++) {
        if (strcmp(argv[i], g4_cli_global_opts[0].name) != 0) {
            argv[w++] = argv[i];
            continue;
        }
        if (!g4_cli_int(cmd, "--threads", i + 1 < *argc ? argv[i + 1] : NULL, 1, G4_CLI_MAX_THREADS,
                        &n))
            return 0;
        g4_set_threads((int)n);
        i++;
    }
    argv[w] = NULL;
    *argc = w;
    return 1;
}
