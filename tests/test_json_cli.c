// test_json_cli.c: the machine-readable forms, checked against independent sources:
//   inspect --json: the decoder's sizes against genai_config.json read here with cJSON, every
//     component's tensor table against the text form's table (names, dtypes, counts), and
//     --tensor's statistics against the text form's line;
//   tokenize --json: ids and pieces against the plain and --pieces forms, --decode's text
//     against the plain form, a NUL and a quote escaped.
// Runs g4cu on the tiny fixture (CPU only: runs in CI).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/test_util.h"

static const char *g4cu, *pkg, *tok;
static char *tmp;

// Takes args (a g4_sprintf string) and frees it.
static cJSON *run_json(char *args) {
    int rc = g4t_sh("'%s' %s >'%s/out.json' 2>'%s/err'", g4cu, args, tmp, tmp);
    CHECK_MSG(rc == 0, "g4cu %s: exit %d", args, rc);
    char *s = g4t_slurp("%s/out.json", tmp);
    cJSON *j = cJSON_Parse(s);
    CHECK_MSG(j != NULL, "g4cu %s: not JSON: %.200s", args, s);
    free(s);
    free(args);
    return j;
}

static int json_int(const cJSON *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    for (char *k = strtok(buf, "."); k && cur; k = strtok(NULL, "."))
        cur = cJSON_GetObjectItemCaseSensitive(cur, k);
    return cJSON_IsNumber(cur) ? cur->valueint : -12345;
}

// The tensor rows of each component in the text form: "  name dtype shape where".
static void check_tables(const cJSON *j) {
    CHECK(g4t_sh("'%s' inspect '%s' >'%s/out.txt' 2>&1", g4cu, pkg, tmp) == 0);
    char *txt = g4t_slurp("%s/out.txt", tmp);
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(j, "components");
    int n_comps = 0;
    for (const cJSON *c = comps ? comps->child : NULL; c; c = c->next) {
        if (cJSON_IsNull(c)) continue;
        n_comps++;
        const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
        // The component's section: from "\n<name>: " to the next blank line.
        char head[128];
        snprintf(head, sizeof head, "\n%s: ", c->string);
        char *sec = strstr(txt, head);
        CHECK_MSG(sec != NULL, "%s: no text section", c->string);
        if (!sec) continue;
        char *end = strstr(sec + 1, "\n\n");
        int rows = 0, matched = 0;
        for (char *line = strstr(sec, "\n  tensor "); line && (!end || line < end);) {
            line = strchr(line + 1, '\n');
            if (!line || (end && line >= end) || strncmp(line, "\n  ", 3) != 0) break;
            char name[256], dtype[32];
            if (sscanf(line + 3, "%255s %31s", name, dtype) != 2) break;
            if (!strcmp(name, "inconsistency:")) break;
            rows++;
            for (const cJSON *t = tensors ? tensors->child : NULL; t; t = t->next) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "dtype");
                if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && cJSON_IsString(d) &&
                    !strcmp(d->valuestring, dtype)) {
                    matched++;
                    break;
                }
            }
        }
        CHECK_MSG(rows > 0 && rows == cJSON_GetArraySize(tensors) && matched == rows,
                  "%s: %d text rows, %d JSON tensors, %d matched", c->string, rows,
                  cJSON_GetArraySize(tensors), matched);
    }
    CHECK(n_comps >= 2);
    free(txt);
}

static void test_inspect(void) {
    cJSON *j = run_json(g4_sprintf("inspect '%s' --json", pkg));
    if (!j) return;
    char *cfg_path = g4_path_join(pkg, "genai_config.json"), *cfg_s = NULL;
    size_t n = 0;
    CHECK(g4_read_file(cfg_path, &cfg_s, &n) == 0);
    cJSON *cfg = cJSON_Parse(cfg_s);
    CHECK(cfg != NULL);
    const struct {
        const char *ours, *genai;
    } same[] = {{"text.hidden", "model.decoder.hidden_size"},
                {"text.layers", "model.decoder.num_hidden_layers"},
                {"text.heads", "model.decoder.num_attention_heads"},
                {"text.kv_heads", "model.decoder.num_key_value_heads"},
                {"text.vocab", "model.vocab_size"},
                {"text.bos", "model.bos_token_id"},
                {"text.image_token", "model.image_token_id"},
                {"text.audio_token", "model.audio_token_id"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        CHECK_MSG(json_int(j, same[i].ours) == json_int(cfg, same[i].genai) &&
                      json_int(j, same[i].ours) != -12345,
                  "%s %d vs genai_config %s %d", same[i].ours, json_int(j, same[i].ours),
                  same[i].genai, json_int(cfg, same[i].genai));
    const cJSON *layers =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(j, "text"), "per_layer");
    CHECK_INT(cJSON_GetArraySize(layers), json_int(cfg, "model.decoder.num_hidden_layers"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "consistent")));
    CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "issues")), 0);
    check_tables(j);

    // --tensor: the first fp16 decoder tensor; its stats as the text line prints them.
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "components"), "decoder");
    const char *name = NULL;
    for (const cJSON *t = cJSON_GetObjectItem(dec, "tensors")->child; t && !name; t = t->next)
        if (!strcmp(cJSON_GetObjectItem(t, "dtype")->valuestring, "float16") &&
            json_int(t, "nbytes") > 64)
            name = cJSON_GetObjectItem(t, "name")->valuestring;
    CHECK(name != NULL);
    if (name) {
        cJSON *tj = run_json(g4_sprintf("inspect '%s' --json --tensor '%s'", pkg, name));
        CHECK(g4t_sh("'%s' inspect '%s' --tensor '%s' >'%s/t.txt'", g4cu, pkg, name, tmp) == 0);
        char *txt = g4t_slurp("%s/t.txt", tmp);
        double mn, mx, mean, amean;
        const char *l = strstr(txt, "  min ");
        CHECK(l && sscanf(l, "  min %lf  max %lf  mean %lf  abs-mean %lf", &mn, &mx, &mean,
                          &amean) == 4);
        const cJSON *st = cJSON_GetObjectItem(tj, "stats");
        const double got[4] = {cJSON_GetObjectItem(st, "min")->valuedouble,
                               cJSON_GetObjectItem(st, "max")->valuedouble,
                               cJSON_GetObjectItem(st, "mean")->valuedouble,
                               cJSON_GetObjectItem(st, "abs_mean")->valuedouble};
        const double want[4] = {mn, mx, mean, amean};
        for (int i = 0; i < 4; i++) // the text prints %.6g
            CHECK_MSG(fabs(got[i] - want[i]) <= 1e-5 * fabs(want[i]) + 1e-12,
                      "%s stat %d: %g vs text %g", name, i, got[i], want[i]);
        CHECK(!strcmp(cJSON_GetObjectItem(tj, "name")->valuestring, name));
        free(txt);
        cJSON_Delete(tj);
    }
    int rc =
        g4t_sh("'%s' inspect '%s' --json --tensor no.such >/dev/null 2>'%s/err'", g4cu, pkg, tmp);
    CHECK_INT(rc, 1);
    cJSON_Delete(cfg);
    free(cfg_s), free(cfg_path);
    cJSON_Delete(j);
}

static void test_tokenize(void) {
    const char *text = "Hello <|image> w\xc3\xb6rld \\\"q\\\"";
    cJSON *j = run_json(g4_sprintf("tokenize '%s' --json \"%s\"", tok, text));
    CHECK(g4t_sh("'%s' tokenize '%s' \"%s\" >'%s/ids.txt'", g4cu, tok, text, tmp) == 0);
    CHECK(g4t_sh("'%s' tokenize '%s' --pieces \"%s\" >'%s/pieces.txt'", g4cu, tok, text, tmp) == 0);
    char *ids = g4t_slurp("%s/ids.txt", tmp), *pieces = g4t_slurp("%s/pieces.txt", tmp);
    // ids: the comma-joined JSON list equals the plain line
    char joined[4096] = "";
    const cJSON *a = cJSON_GetObjectItem(j, "ids"), *ps = cJSON_GetObjectItem(j, "pieces");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%d",
                 e == a->child ? "" : ",", e->valueint);
    strcat(joined, "\n");
    CHECK_MSG(!strcmp(joined, ids), "JSON ids %s vs plain %s", joined, ids);
    // pieces: "id\tpiece" lines
    CHECK_INT(cJSON_GetArraySize(ps), cJSON_GetArraySize(a));
    char *line = pieces;
    int k = 0;
    for (const cJSON *e = ps ? ps->child : NULL; e && line; e = e->next, k++) {
        char *tab = strchr(line, '\t'), *nl = tab ? strchr(tab, '\n') : NULL;
        CHECK(tab && nl);
        if (!tab || !nl) break;
        CHECK_MSG(strlen(e->valuestring) == (size_t)(nl - tab - 1) &&
                      !memcmp(e->valuestring, tab + 1, (size_t)(nl - tab - 1)),
                  "piece %d: '%s'", k, e->valuestring);
        line = nl + 1;
    }
    cJSON_Delete(j);
    free(ids), free(pieces);
    // decode: the text equals the plain form's bytes
    j = run_json(g4_sprintf("tokenize '%s' --decode --json 313,590,347,392,773,349,275", tok));
    CHECK(g4t_sh("'%s' tokenize '%s' --decode 313,590,347,392,773,349,275 >'%s/dec.txt'", g4cu, tok,
                 tmp) == 0);
    char *dec = g4t_slurp("%s/dec.txt", tmp);
    const cJSON *t = cJSON_GetObjectItem(j, "text");
    CHECK(cJSON_IsString(t) && strlen(dec) == strlen(t->valuestring) + 1 &&
          !strncmp(dec, t->valuestring, strlen(t->valuestring)));
    free(dec);
    cJSON_Delete(j);
    // a NUL byte in the text stays in the JSON, escaped
    CHECK(g4t_sh("'%s' tokenize '%s' --decode --json 2,5 | grep -qF '\\u0000'", g4cu, tok) == 0);
}

int main(void) {
    g4cu = g4t_env("G4CU");
    pkg = g4t_env("G4_TINY_PKG");
    tok = g4_sprintf("%s/chat/chat_bpe.json", g4t_env("G4_FIXTURES"));
    tmp = g4t_tmpdir();
    test_inspect();
    test_tokenize();
    g4t_rmtree(tmp);
    return g4t_finish("test_json_cli");
}
