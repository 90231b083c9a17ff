// g4cu tokenize TOKENIZER_JSON|PKG [--bos] [--pieces] TEXT|-
// g4cu tokenize TOKENIZER_JSON|PKG --decode [--skip-special] IDS|-
// Manual checks of loader/tokenizer (a package directory means its tokenizer.json): encode prints
// the ids comma-separated on one line (the form `g4cu logits --ids` takes); --pieces prints
// "id<TAB>piece" lines instead. --decode prints the text of ids given as "2,106,107" (commas and/or
// spaces). "-" reads the argument from stdin.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/tokenizer.h"
#include "tools/cli.h"

// "2,106 107" -> ids; 0 (after printing why) on anything else.
static int parse_ids(const char *s, int n_vocab, g4_ids *out) {
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
        g4_ids_push(out, (int)v);
        p = end;
    }
    return 1;
}

static int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *arg = NULL;
    int decode = 0, bos = 0, pieces = 0, skip_special = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--decode"))
            decode = 1;
        else if (!strcmp(argv[i], "--bos"))
            bos = 1;
        else if (!strcmp(argv[i], "--pieces"))
            pieces = 1;
        else if (!strcmp(argv[i], "--skip-special"))
            skip_special = 1;
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
    g4_tokenizer *t;
    int rc = g4_tokenizer_open(file, &t);
    free(file);
    if (rc) return g4_cli_fail(rc);
    size_t n;
    char *input = NULL;
    if (!strcmp(arg, "-")) {
        if ((rc = g4_read_fd(0, "stdin", G4_MAX_TEXT_BYTES, &input, &n))) {
            g4_tokenizer_close(t);
            return g4_cli_fail(rc);
        }
    } else {
        n = strlen(arg);
        input = g4_strdup(arg);
    }
    g4_ids ids = {0};
    int status = 0;
    if (decode) {
        if (!parse_ids(input, g4_tokenizer_n_vocab(t), &ids)) {
            status = 1;
        } else {
            char *text;
            size_t len;
            rc = g4_tokenizer_decode(t, ids.v, ids.n, skip_special, &text, &len);
            if (rc) {
                status = g4_cli_fail(rc);
            } else {
                fwrite(text, 1, len, stdout);
                fputc('\n', stdout);
                free(text);
            }
        }
    } else {
        rc = g4_tokenizer_encode(t, input, n, bos, &ids);
        if (rc) {
            status = g4_cli_fail(rc);
        } else if (pieces) {
            for (size_t i = 0; i < ids.n; i++) {
                size_t len = 0;
                const char *p = g4_tokenizer_piece(t, ids.v[i], &len);
                printf("%d\t%.*s\n", ids.v[i], (int)len, p ? p : "");
            }
        } else {
            for (size_t i = 0; i < ids.n; i++) printf("%s%d", i ? "," : "", ids.v[i]);
            printf("\n");
        }
    }
    g4_ids_free(&ids);
    free(input);
    g4_tokenizer_close(t);
    return status;
}

const g4_cmd g4_cmd_tokenize = {
    "tokenize", cmd_tokenize,
    "TOKENIZER_JSON|PKG [--bos] [--pieces] TEXT|-   ids;  --decode [--skip-special] IDS|-  text"};
