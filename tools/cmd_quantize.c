// g4cu quantize PKG_F16 OUT [--keep PATTERN]... [--threads N]: k-quant the decoder's linears into
// a Q4 (MatMulNBits) package, the way Olive made the published "Q4_K_M" packages
// (quant/q4_writer.h). OUT must not exist (nor lie inside PKG_F16); it appears only when
// complete. The work goes to OUT.tmp-<pid> beside it; a run that is killed leaves that
// directory, and the next quantize to the same OUT removes those whose process is gone.
// Unchanged files are copied (reflinked where the file system can), never hard-linked.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "quant/q4.h"
#include "quant/q4_writer.h"
#include "tools/cli.h"

static int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    const char **keep = g4_calloc((size_t)argc, sizeof(char *));
    int n_keep = 0;
    long long threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keep")) {
            if (++i >= argc) {
                free(keep);
                return g4_cli_usage_error("quantize", "--keep needs a pattern");
            }
            keep[n_keep++] = argv[i];
        } else if (!strcmp(argv[i], "--threads")) {
            if (!g4_cli_int("quantize", "--threads", i + 1 < argc ? argv[++i] : NULL, 1, 1024,
                            &threads)) {
                free(keep);
                return 1;
            }
        } else if (argv[i][0] == '-') {
            free(keep);
            return g4_cli_usage_error("quantize", "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            free(keep);
            return g4_cli_usage_error("quantize", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!in || !out) {
        free(keep);
        return g4_cli_usage_error("quantize", "expected PKG_F16 OUT");
    }
    g4_q4_write_opts o = {keep, n_keep, G4_Q4_BLOCK, (int)threads, stderr, stderr};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(in, out, &o, &st);
    free(keep);
    if (rc) return g4_cli_fail(rc);
    printf("%s: %d linears quantized to 4 bits (block %d, %d weights), %d kept fp16; decoder data "
           "%llu bytes\n",
           out, st.n_quantized, G4_Q4_BLOCK, st.n_weights, st.n_kept,
           (unsigned long long)st.data_bytes);
    g4_q4_write_stats_free(&st);
    return 0;
}

const g4_cmd g4_cmd_quantize = {
    "quantize", cmd_quantize,
    "PKG_F16 OUT [--keep PATTERN]... [--threads N]   k-quant the decoder into a Q4 package (work "
    "in OUT.tmp-<pid>, renamed when complete; a killed run's is removed by the next run; "
    "unchanged files are copied or reflinked, never hard-linked)"};
