// g4cu logits PKG --ids 2,5,17 [--backend cpu|cuda] --out F.npy
// Teacher-forced prefill of the ids; writes float32 [seq, vocab] soft-capped logits.
#include <stdio.h>
#include <stdlib.h>

#include "engine/backend_select.h"
#include "engine/text_model.h"
#include "eval/npy.h"
#include "tools/cli.h"

// "2,5,17" -> ids (new array).
static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16;
    *n = 0;
    *ids = g4_malloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
            free(*ids);
            return g4_fail(G4_EUSER, "--ids '%s': expected comma-separated non-negative integers",
                           s);
        }
        if (*n == cap) *ids = g4_realloc(*ids, sizeof(int32_t) * (size_t)(cap *= 2));
        (*ids)[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        free(*ids);
        return g4_fail(G4_EUSER, "--ids: no token ids given");
    }
    return G4_OK;
}

static int cmd_logits(int argc, char **argv) {
    const char *pkg_dir = NULL, *ids_s = NULL, *out = NULL, *backend = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (argv[i][0] == '-') return g4_cli_usage_error("logits", "unknown option '%s'", argv[i]);
        else if (!pkg_dir) pkg_dir = argv[i];
        else return g4_cli_usage_error("logits", "unexpected argument '%s'", argv[i]);
    }
    if (!pkg_dir || !ids_s || !out)
        return g4_cli_usage_error("logits", "needs PKG, --ids and --out");
    int32_t *ids;
    int n, rc;
    if ((rc = parse_ids(ids_s, &ids, &n))) return g4_cli_fail(rc);
    g4_backend *be;
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_text_state *s = NULL;
    float *logits = NULL;
    if ((rc = g4_backend_by_name(backend, &be)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)) || (rc = g4_text_state_new(m, n, n, &s)))
        goto done;
    logits = g4_malloc(sizeof(float) * (size_t)n * p->text.vocab);
    if ((rc = g4_text_forward(s, ids, n, NULL, logits, 1))) goto done;
    int64_t shape[2] = {n, p->text.vocab};
    rc = g4_npy_write(out, G4_DT_FLOAT, 2, shape, logits);
done:
    free(ids);
    free(logits);
    g4_text_state_free(s);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc ? g4_cli_fail(rc) : 0;
}

const g4_cmd g4_cmd_logits = {"logits", cmd_logits,
                              "PKG --ids 2,5,17 [--backend cpu|cuda] --out F.npy   float32 "
                              "[seq, vocab] logits of a teacher-forced prefill"};
