// g4cu tokenize TOKENIZER_JSON|PKG [--bos] [--pieces] TEXT|-
// g4cu tokenize TOKENIZER_JSON|PKG --decode [--skip-special] IDS|-
// Manual checks of loader/tokenizer (a package directory means its tokenizer.json): encode prints
// the ids comma-separated on one line (the form `g4cu logits --ids` takes); --pieces prints
// "id<TAB>piece" lines instead. --decode prints the text of ids given as "2,106,107" (commas and/or
// spaces). "-" reads the argument from stdin. --json prints one object instead: encoding
// {"ids": [...], "pieces": [...]}, decoding {"ids": [...], "text": "..."}.
// On the public C API (include/g4cu.h: g4cu_tokenizer_*).
#include <errno.h>
#include <g4cu.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/cli.h"

// "2,106 107" -> *ids (malloc'ed), *n; 0 (after printing why) on anything else.
static int parse_ids(const char *s, int n_vocab, int32_t **ids, int *n) {
    size_t cap = 16;
    *ids = g4_malloc(cap * sizeof **ids);
    *n = 0;
    const char *p = s;
    while (*p) {
        if (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab) {
            g4_cli_usage_error("tokenize",
                               "--decode expects ids in [0, %d) separated by commas "
                               "or spaces, got '%.20s'",
                               n_vocab, p);
            return 0;
        }
        if ((size_t)*n == cap) *ids = g4_realloc(*ids, (cap *= 2) * sizeof **ids);
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return 1;
}

// {"ids": [...], then the caller's key and value.
static void print_ids_json(const int32_t *ids, int n) {
    printf("{\"ids\":[");
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("]");
}

static int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *arg = NULL;
    int decode = 0, bos = 0, pieces = 0, skip_special = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--decode"))
            decode = 1;
        else if (!strcmp(argv[i], "--bos"))
            bos = 1;
        else if (!strcmp(argv[i], "--pieces"))
            pieces = 1;
        else if (!strcmp(argv[i], "--skip-special"))
            skip_special = 1;
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1] == '-')
            return g4_cli_usage_error("tokenize", "unknown option '%s'", argv[i]);
        else if (!path)
            path = argv[i];
        else if (!arg)
            arg = argv[i];
        else
            return g4_cli_usage_error("tokenize", "unexpected argument '%s'", argv[i]);
    }
    if (!path) return g4_cli_usage_error("tokenize", "missing TOKENIZER_JSON");
    if (!arg) return g4_cli_usage_error("tokenize", "missing %s", decode ? "IDS" : "TEXT");
    if (decode && (bos || pieces))
        return g4_cli_usage_error("tokenize", "--bos and --pieces apply to encoding only");
    if (!decode && skip_special)
        return g4_cli_usage_error("tokenize", "--skip-special applies to --decode only");
    // A package directory holds its tokenizer as tokenizer.json.
    char *file = g4_is_dir(path) ? g4_path_join(path, "tokenizer.json") : g4_strdup(path);
    g4cu_tokenizer *t;
    int rc = g4cu_tokenizer_load(file, &t);
    free(file);
    if (rc) return g4_cli_fail(rc);
    size_t n;
    char *input = NULL;
    if (!strcmp(arg, "-")) {
        if ((rc = g4_read_fd(0, "stdin", G4_MAX_TEXT_BYTES, &input, &n))) {
            g4cu_tokenizer_free(t);
            return g4_cli_fail(rc);
        }
    } else {
        n = strlen(arg);
        input = g4_strdup(arg);
    }
    int32_t *ids = NULL;
    int n_ids = 0, status = 0;
    if (decode) {
        if (!parse_ids(input, g4cu_tokenizer_n_vocab(t), &ids, &n_ids)) {
            status = 1;
        } else {
            char *text;
            size_t len;
            rc = g4cu_tokenizer_decode(t, ids, n_ids, skip_special, &text, &len);
            if (rc) {
                status = g4_cli_fail(rc);
            } else if (json) {
                print_ids_json(ids, n_ids);
                printf(",\"text\":");
                g4_cli_json_string(stdout, text, len);
                printf("}\n");
                g4cu_free(text);
            } else {
                fwrite(text, 1, len, stdout);
                fputc('\n', stdout);
                g4cu_free(text);
            }
        }
    } else {
        rc = g4cu_tokenizer_encode(t, input, n, bos, &ids, &n_ids);
        if (rc) {
            status = g4_cli_fail(rc);
        } else if (json) {
            print_ids_json(ids, n_ids);
            printf(",\"pieces\":[");
            for (int i = 0; i < n_ids; i++) {
                size_t len = 0;
                const char *p = g4cu_tokenizer_piece(t, ids[i], &len);
                if (i) printf(",");
                g4_cli_json_string(stdout, p ? p : "", p ? len : 0);
            }
            printf("]}\n");
        } else if (pieces) {
            for (int i = 0; i < n_ids; i++) {
                size_t len = 0;
                const char *p = g4cu_tokenizer_piece(t, ids[i], &len);
                printf("%d\t%.*s\n", ids[i], (int)len, p ? p : "");
            }
        } else {
            for (int i = 0; i < n_ids; i++) printf("%s%d", i ? "," : "", ids[i]);
            printf("\n");
        }
    }
    if (decode)
        free(ids); // parse_ids's
    else
        g4cu_free(ids); // the library's
    free(input);
    g4cu_tokenizer_free(t);
    return status;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt tokenize_opts[] = {
    {"--bos", NULL, "put <bos> first (default off)"},
    {"--pieces", NULL, "print each id with its piece (default: ids only)"},
    {"--decode", NULL, "decode comma-separated ids to text instead"},
    {"--skip-special", NULL, "--decode: leave out special tokens (default: keep them)"},
    {"--json", NULL, "one JSON object: ids and pieces (encode) or ids and text (--decode)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_tokenize = {
    "tokenize", cmd_tokenize,
    "TOKENIZER_JSON|PKG [--bos] [--pieces] [--json] TEXT|-   ids;  --decode [--skip-special] "
    "[--json] IDS|-  text",
    tokenize_opts, NULL};
