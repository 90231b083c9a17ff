// g4cu vqa PKG IMAGE QUESTION [options]
// g4cu vqa PKG --batch ITEMS.jsonl [options]
// Visual question answering: the image, then the question, in one user turn; the answer
// streams to stdout. --batch: one {"image": F, "question": Q, "id": any} object a line (an
// image path relative to the file's directory; id optional), answered in turn with the model
// loaded once (tools/gen_cli.h g4_gen_cli_run_batch: one JSON line each with --json); a line
// that cannot be read or run is reported and the rest go on.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/gen_cli.h"

typedef struct {
    g4_gen_cli_item *items;
    int n;
    char **owned; // strings the items point into
    int n_owned;
    cJSON **docs;
} batch;

static const char *keep(batch *b, char *s) {
    b->owned = g4_realloc(b->owned, sizeof(char *) * (size_t)(b->n_owned + 1));
    return b->owned[b->n_owned++] = s;
}

// The lines of path as items; blank lines are skipped.
static int read_batch(const char *path, batch *b) {
    char *text = NULL;
    size_t len = 0;
    int rc = g4_read_file(path, &text, &len);
    if (rc) return rc;
    keep(b, text);
    const char *slash = strrchr(path, '/');
    char *dir = slash ? g4_strndup(path, (size_t)(slash - path)) : g4_strdup(".");
    keep(b, dir);
    int line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        line_no++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (!line[strspn(line, " \t\r")]) continue;
        b->items = g4_realloc(b->items, sizeof *b->items * (size_t)(b->n + 1));
        b->docs = g4_realloc(b->docs, sizeof *b->docs * (size_t)(b->n + 1));
        g4_gen_cli_item *it = &b->items[b->n];
        cJSON *j = b->docs[b->n++] = cJSON_Parse(line);
        *it = (g4_gen_cli_item){.input = keep(b, g4_sprintf("%s:%d", path, line_no))};
        const cJSON *img = cJSON_GetObjectItemCaseSensitive(j, "image");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "question");
        it->id = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (!cJSON_IsObject(j)) {
            it->error = "not a JSON object";
            continue;
        }
        if (!cJSON_IsString(img) || !cJSON_IsString(q)) {
            it->error = "needs \"image\" and \"question\" strings";
            continue;
        }
        const char *image = img->valuestring[0] == '/'
                                ? img->valuestring
                                : keep(b, g4_path_join(dir, img->valuestring));
        it->media = (g4cu_media){.kind = G4CU_IMAGE_FILE, .path = image};
        it->text = q->valuestring;
    }
    if (b->n == 0) // (it exited 0 having answered nothing)
        return g4_fail(G4_EUSER, "%s: no items (expected one {\"image\", \"question\", \"id\"} "
                       "JSON object a line)", path);
    // An id names one answer: a repeated one would make two answers with the same name.
    char **ids = g4_calloc((size_t)b->n, sizeof *ids);
    g4_strmap seen;
    g4_strmap_init(&seen, (size_t)b->n);
    rc = G4_OK;
    for (int i = 0; i < b->n && !rc; i++) {
        if (!b->items[i].id || !(ids[i] = cJSON_PrintUnformatted(b->items[i].id))) continue;
        if (!g4_strmap_put(&seen, ids[i], i))
            rc = g4_fail(G4_EUSER, "%s: id %s again (also %s); ids must be unique",
                         b->items[i].input, ids[i], b->items[g4_strmap_get(&seen, ids[i])].input);
    }
    g4_strmap_free(&seen);
    for (int i = 0; i < b->n; i++) free(ids[i]);
    free(ids);
    return rc;
}

static void batch_free(batch *b) {
    for (int i = 0; i < b->n; i++) cJSON_Delete(b->docs[i]);
    for (int i = 0; i < b->n_owned; i++) free(b->owned[i]);
    free(b->items), free(b->owned), free(b->docs);
}

static int cmd_vqa(int argc, char **argv) {
    g4_gen_cli o;
    g4_gen_cli_init(&o, "vqa");
    const char *pos[3] = {0}, *batch_path = NULL;
    int n_pos = 0, code = 1;
    for (int i = 1; i < argc; i++) {
        int r = g4_gen_cli_option(&o, argc, argv, &i);
        if (r < 0) goto done;
        if (r) continue;
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch_path = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) {
            code = g4_cli_usage_error("vqa", "unknown option '%s' (or it needs a value)", argv[i]);
            goto done;
        } else if (n_pos < 3)
            pos[n_pos++] = argv[i];
        else {
            code = g4_cli_usage_error("vqa", "unexpected argument '%s'", argv[i]);
            goto done;
        }
    }
    if (batch_path) {
        if (n_pos != 1) {
            code = g4_cli_usage_error("vqa", "--batch takes PKG only (the items hold the images "
                                             "and questions)");
            goto done;
        }
        batch b = {0};
        int rc = read_batch(batch_path, &b);
        code = rc ? g4_cli_fail(rc) : g4_gen_cli_run_batch(&o, pos[0], b.items, b.n);
        batch_free(&b);
        goto done;
    }
    if (n_pos < 3) {
        code = g4_cli_usage_error("vqa", "needs PKG, IMAGE and QUESTION");
        goto done;
    }
    const g4cu_media image = {.kind = G4CU_IMAGE_FILE, .path = pos[1]};
    code = g4_gen_cli_run(&o, pos[0], &image, 1, pos[2]);
done:
    g4_gen_cli_free(&o);
    return code;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt vqa_opts[] = {
    {"--batch", "F.jsonl", "answer each {image, question, id} line of F, the model loaded once"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_vqa = {"vqa", cmd_vqa,
                           "PKG IMAGE QUESTION | PKG --batch ITEMS.jsonl " G4_GEN_CLI_USAGE
                           "   answer on stdout (--batch: one per line, JSONL with --json)",
                           vqa_opts, g4_gen_cli_opts};
