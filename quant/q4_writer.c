// q4_writer.c: fp16 package -> Q4 package (see q4_writer.h).
//
// The decoder's model.onnx is decoded a second time with protobuf-c (the loader's copy is
// read-only and keeps only what it reads), edited in place and packed again. Every piece added
// to the message tree is allocated with malloc, as protobuf-c's unpacker allocates, so the
// whole tree is released by one onnx__model_proto__free_unpacked.
#include "quant/q4_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/progress.h"
#include "loader/package.h"
#include "onnx.pb-c.h"
#include "quant/ext_layout.h"
#include "quant/kquant.h"
#include "quant/pkg_tree.h"
#include "quant/q4.h"

static const char *const MSFT = "com.microsoft";

void g4_q4_write_stats_free(g4_q4_write_stats *st) {
    if (!st) return;
    for (int i = 0; i < st->n_weights; i++) free(st->names[i]);
    free(st->names);
    memset(st, 0, sizeof *st);
}

// --- building protobuf-c messages ---------------------------------------------------------------

static Onnx__TensorProto *new_tensor(const char *name, int dtype, int ndim, const int64_t *dims) {
    Onnx__TensorProto *t = g4_malloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = g4_strdup(name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)ndim;
    t->dims = g4_malloc(sizeof(int64_t) * (size_t)ndim);
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)ndim);
    return t;
}

static Onnx__AttributeProto *new_int_attr(const char *name, int64_t v) {
    Onnx__AttributeProto *a = g4_malloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = g4_strdup(name);
    a->has_i = 1;
    a->i = v;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    return a;
}

static Onnx__StringStringEntryProto *new_entry(const char *key, const char *value) {
    Onnx__StringStringEntryProto *e = g4_malloc(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = g4_strdup(key);
    e->value = g4_strdup(value);
    return e;
}

static void replace_str(char **slot, const char *s) {
    free(*slot);
    *slot = g4_strdup(s);
}

// Drops a tensor's payload (raw, typed or external) before it is given a new one.
static void clear_payload(Onnx__TensorProto *t) {
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->raw_data.len = 0;
    t->has_raw_data = 0;
    free(t->float_data);
    free(t->int32_data);
    free(t->int64_data);
    free(t->double_data);
    free(t->uint64_data);
    for (size_t i = 0; i < t->n_string_data; i++) free(t->string_data[i].data);
    free(t->string_data);
    t->float_data = NULL, t->n_float_data = 0;
    t->int32_data = NULL, t->n_int32_data = 0;
    t->int64_data = NULL, t->n_int64_data = 0;
    t->double_data = NULL, t->n_double_data = 0;
    t->uint64_data = NULL, t->n_uint64_data = 0;
    t->string_data = NULL, t->n_string_data = 0;
    for (size_t i = 0; i < t->n_external_data; i++)
        onnx__string_string_entry_proto__free_unpacked(t->external_data[i], NULL);
    free(t->external_data);
    t->external_data = NULL;
    t->n_external_data = 0;
    t->has_data_location = 0;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
}

static int pwrite_all(int fd, const void *data, uint64_t n, uint64_t off, const char *path) {
    const uint8_t *p = data;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = pwrite(fd, p, chunk, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return g4_fail(G4_EUSER, "%s: write failed: %s", path, strerror(errno));
        p += w, n -= (uint64_t)w, off += (uint64_t)w;
    }
    return G4_OK;
}

typedef struct {
    int fd;
    const char *path;     // data file, for messages
    const char *location; // its name relative to model.onnx
} data_file;

// Gives tensor t its bytes: inline raw_data, or external at `off` in the data file.
static int place(Onnx__TensorProto *t, const void *bytes, uint64_t n, uint64_t off,
                 const data_file *df) {
    clear_payload(t);
    if (off == G4_EXT_INLINE) {
        t->has_raw_data = 1;
        t->raw_data.len = (size_t)n;
        t->raw_data.data = n ? g4_malloc((size_t)n) : NULL;
        if (n) memcpy(t->raw_data.data, bytes, (size_t)n);
        return G4_OK;
    }
    int rc = pwrite_all(df->fd, bytes, n, off, df->path);
    if (rc) return rc;
    char off_s[32], len_s[32];
    snprintf(off_s, sizeof off_s, "%llu", (unsigned long long)off);
    snprintf(len_s, sizeof len_s, "%llu", (unsigned long long)n);
    t->n_external_data = 3; // the entries onnx_ir writes, in its order
    t->external_data = g4_malloc(3 * sizeof *t->external_data);
    t->external_data[0] = new_entry("location", df->location);
    t->external_data[1] = new_entry("offset", off_s);
    t->external_data[2] = new_entry("length", len_s);
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    return G4_OK;
}

// --- the rewrite --------------------------------------------------------------------------------

typedef struct {
    const char *w_name;   // the fp16 initializer (a string of the decoded proto, kept alive)
    const g4_tensor *src; // its bytes in the source package
    int K, N;
    Onnx__TensorProto *tp[3]; // "<W>_Q4", "<W>_scales", "<W>_zero_point"
} wjob;

typedef struct {
    int node;     // index in graph.node
    int job;      // wjob index
    char *out;    // the new node's output name
    char *rename; // the old output name when renamed, else NULL
} conv;

static int keep_match(const g4_q4_write_opts *o, const char *prefix, const char *name) {
    size_t pl = prefix ? strlen(prefix) : 0;
    const char *bare = pl && !strncmp(name, prefix, pl) ? name + pl : name;
    for (int i = 0; i < o->n_keep; i++)
        if (fnmatch(o->keep[i], name, 0) == 0 || fnmatch(o->keep[i], bare, 0) == 0) return 1;
    return 0;
}

static int has_subgraphs(const Onnx__GraphProto *g) {
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t a = 0; a < g->node[i]->n_attribute; a++) {
            const Onnx__AttributeProto *at = g->node[i]->attribute[a];
            if (at->has_type && (at->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
                                 at->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS))
                return 1;
            for (unsigned u = 0; u < at->base.n_unknown_fields; u++) // g = 6, graphs = 11
                if (at->base.unknown_fields[u].tag == 6 || at->base.unknown_fields[u].tag == 11)
                    return 1;
        }
    return 0;
}

static int is_graph_output(const Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name && !strcmp(g->output[i]->name, name)) return 1;
    return 0;
}

static int is_graph_input(const Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_input; i++)
        if (g->input[i]->name && !strcmp(g->input[i]->name, name)) return 1;
    return 0;
}

static void ensure_msft_opset(Onnx__ModelProto *mp) {
    for (size_t i = 0; i < mp->n_opset_import; i++)
        if (mp->opset_import[i]->domain && !strcmp(mp->opset_import[i]->domain, MSFT)) return;
    Onnx__OperatorSetIdProto *op = g4_malloc(sizeof *op);
    onnx__operator_set_id_proto__init(op);
    op->domain = g4_strdup(MSFT);
    op->has_version = 1;
    op->version = 1;
    mp->opset_import =
        g4_realloc(mp->opset_import, sizeof(*mp->opset_import) * (mp->n_opset_import + 1));
    mp->opset_import[mp->n_opset_import++] = op;
}

// The MatMulNBits node that replaces MatMul `old` (Olive: name "<old>_Q4", no metadata).
static Onnx__NodeProto *new_nbits_node(const Onnx__NodeProto *old, const wjob *j, const char *out,
                                       int block) {
    Onnx__NodeProto *n = g4_malloc(sizeof *n);
    onnx__node_proto__init(n);
    if (old->name && old->name[0]) n->name = g4_sprintf("%s_Q4", old->name);
    n->op_type = g4_strdup("MatMulNBits");
    n->domain = g4_strdup(MSFT);
    n->n_input = 4;
    n->input = g4_malloc(4 * sizeof(char *));
    n->input[0] = g4_strdup(old->input[0]);
    for (int r = 0; r < 3; r++) n->input[r + 1] = g4_strdup(j->tp[r]->name);
    n->n_output = 1;
    n->output = g4_malloc(sizeof(char *));
    n->output[0] = g4_strdup(out);
    n->n_attribute = 4;
    n->attribute = g4_malloc(4 * sizeof *n->attribute);
    n->attribute[0] = new_int_attr("K", j->K);
    n->attribute[1] = new_int_attr("N", j->N);
    n->attribute[2] = new_int_attr("bits", 4);
    n->attribute[3] = new_int_attr("block_size", block);
    return n;
}

typedef struct {
    Onnx__ModelProto *mp;
    wjob *jobs;
    int n_jobs;
    int names_owned; // jobs[].w_name are our copies (after apply)
    conv *convs;
    int n_convs;
} rewrite;

static void rewrite_free(rewrite *rw) {
    if (rw->mp) onnx__model_proto__free_unpacked(rw->mp, NULL);
    for (int j = 0; rw->names_owned && j < rw->n_jobs; j++) free((char *)rw->jobs[j].w_name);
    for (int i = 0; i < rw->n_convs; i++) {
        free(rw->convs[i].out);
        free(rw->convs[i].rename);
    }
    free(rw->convs);
    free(rw->jobs);
    memset(rw, 0, sizeof *rw);
}

// Pass 1: which MatMuls become MatMulNBits, and the names they will use (nothing modified yet).
static int plan(rewrite *rw, const g4_onnx_model *src, const char *prefix,
                const g4_q4_write_opts *o, g4_q4_write_stats *st) {
    const Onnx__GraphProto *g = rw->mp->graph;
    const char *f = src->path;
    g4_strmap values, inits, job_of, new_names;
    size_t cap = g->n_initializer + g->n_input + g->n_node * 2 + 16;
    g4_strmap_init(&values, cap);
    g4_strmap_init(&inits, g->n_initializer + 1);
    g4_strmap_init(&job_of, g->n_initializer + 1);
    g4_strmap_init(&new_names, g->n_node * 4 + 16);
    for (size_t i = 0; i < g->n_input; i++)
        if (g->input[i]->name) g4_strmap_put(&values, g->input[i]->name, 1);
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name) {
            g4_strmap_put(&values, g->initializer[i]->name, 1);
            g4_strmap_put(&inits, g->initializer[i]->name, (int)i);
        }
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_output; k++)
            if (g->node[i]->output[k]) g4_strmap_put(&values, g->node[i]->output[k], 1);
    rw->jobs = g4_calloc(g->n_node + 1, sizeof *rw->jobs);
    rw->convs = g4_calloc(g->n_node + 1, sizeof *rw->convs);
    int rc = G4_OK;
    for (size_t i = 0; i < g->n_node && rc == G4_OK; i++) {
        const Onnx__NodeProto *nd = g->node[i];
        if (!nd->op_type || strcmp(nd->op_type, "MatMul") != 0) continue;
        if (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") != 0) continue;
        if (nd->n_input != 2 || !nd->input[1] || nd->n_output != 1) continue;
        int ti = g4_strmap_get(&inits, nd->input[1]);
        if (ti < 0) continue; // B computed in the graph (not a weight)
        const Onnx__TensorProto *tp = g->initializer[ti];
        if (tp->n_dims != 2) continue;
        if (keep_match(o, prefix, tp->name)) {
            st->n_kept++;
            continue;
        }
        if (tp->data_type != G4_DT_FLOAT16) {
            rc = g4_fail(G4_EUSER,
                         "%s: MatMul weight '%s' is %s, g4cu quantize handles float16 "
                         "weights (keep it with --keep)",
                         f, tp->name, g4_dtype_name(tp->data_type));
            break;
        }
        if (tp->dims[0] < 1 || tp->dims[1] < 1 || tp->dims[0] > INT32_MAX ||
            tp->dims[1] > INT32_MAX) {
            rc = g4_fail(G4_EUSER,
                         "%s: MatMul weight '%s' is [%lld, %lld], expected positive int32 "
                         "dims",
                         f, tp->name, (long long)tp->dims[0], (long long)tp->dims[1]);
            break;
        }
        int j = g4_strmap_get(&job_of, tp->name);
        if (j < 0) {
            const g4_tensor *t = g4_onnx_tensor(src, tp->name);
            G4_ASSERT(t && t->nbytes == (uint64_t)tp->dims[0] * (uint64_t)tp->dims[1] * 2);
            // A NaN / Inf weight rounds to finite scales and garbage codes (rtn), which the
            // output check cannot see: the source is refused as the loader refuses it.
            if ((rc = g4_tensor_check_finite(t, f))) break;
            j = rw->n_jobs++;
            wjob *w = &rw->jobs[j];
            w->w_name = tp->name;
            w->K = (int)tp->dims[0];
            w->N = (int)tp->dims[1];
            w->src = t;
            g4_strmap_put(&job_of, tp->name, j);
            static const char *const suffix[3] = {"_Q4", "_scales", "_zero_point"};
            for (int r = 0; r < 3 && rc == G4_OK; r++) {
                char *nm = g4_sprintf("%s%s", tp->name, suffix[r]);
                if (g4_strmap_get(&values, nm) >= 0)
                    rc = g4_fail(G4_EUSER, "%s: cannot quantize '%s': the name '%s' is taken", f,
                                 tp->name, nm);
                free(nm);
            }
        }
        conv *c = &rw->convs[rw->n_convs++];
        c->node = (int)i;
        c->job = j;
        const char *out = nd->output[0] ? nd->output[0] : "";
        // Olive renames the value "<out>_Q4"; a graph output keeps its name.
        if (out[0] && !is_graph_output(g, out)) {
            c->out = g4_sprintf("%s_Q4", out);
            c->rename = g4_strdup(out);
            if (g4_strmap_get(&values, c->out) >= 0 || !g4_strmap_put(&new_names, c->out, 1))
                rc = g4_fail(G4_EUSER,
                             "%s: cannot rename output '%s' of node '%s' to '%s': the "
                             "name is taken",
                             f, out, nd->name ? nd->name : "", c->out);
        } else {
            c->out = g4_strdup(out);
        }
    }
    g4_strmap_free(&values);
    g4_strmap_free(&inits);
    g4_strmap_free(&job_of);
    g4_strmap_free(&new_names);
    return rc;
}

// Pass 2: new tensors, new nodes, renamed readers, dropped fp16 weights.
static void apply(rewrite *rw, int block) {
    Onnx__GraphProto *g = rw->mp->graph;
    for (int j = 0; j < rw->n_jobs; j++) {
        wjob *w = &rw->jobs[j];
        const g4_q4_shape sh = g4_q4_shape_of(w->K, w->N, block);
        char *nm;
        nm = g4_sprintf("%s_Q4", w->w_name);
        w->tp[0] = new_tensor(nm, G4_DT_UINT8, 3, (int64_t[]){w->N, sh.kb, block / 2});
        free(nm);
        nm = g4_sprintf("%s_scales", w->w_name);
        w->tp[1] = new_tensor(nm, G4_DT_FLOAT16, 1, (int64_t[]){(int64_t)sh.n_scales});
        free(nm);
        nm = g4_sprintf("%s_zero_point", w->w_name);
        w->tp[2] = new_tensor(nm, G4_DT_UINT8, 1, (int64_t[]){(int64_t)sh.zp_bytes});
        free(nm);
    }
    // The weight names are strings of the initializers that may be dropped below: copy them.
    for (int j = 0; j < rw->n_jobs; j++) rw->jobs[j].w_name = g4_strdup(rw->jobs[j].w_name);
    rw->names_owned = 1;

    for (int c = 0; c < rw->n_convs; c++) {
        conv *cv = &rw->convs[c];
        Onnx__NodeProto *old = g->node[cv->node];
        g->node[cv->node] = new_nbits_node(old, &rw->jobs[cv->job], cv->out, block);
        onnx__node_proto__free_unpacked(old, NULL);
    }
    // Renamed outputs: every reader and every value_info entry follows.
    g4_strmap ren;
    g4_strmap_init(&ren, (size_t)rw->n_convs + 1);
    for (int c = 0; c < rw->n_convs; c++)
        if (rw->convs[c].rename) g4_strmap_put(&ren, rw->convs[c].rename, c);
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_input; k++) {
            int c = g->node[i]->input[k] ? g4_strmap_get(&ren, g->node[i]->input[k]) : -1;
            if (c >= 0) replace_str(&g->node[i]->input[k], rw->convs[c].out);
        }
    for (size_t i = 0; i < g->n_value_info; i++) {
        int c = g->value_info[i]->name ? g4_strmap_get(&ren, g->value_info[i]->name) : -1;
        if (c >= 0) replace_str(&g->value_info[i]->name, rw->convs[c].out);
    }
    g4_strmap_free(&ren);

    // Drop each quantized fp16 weight nothing reads any more (a graph input keeps it).
    g4_strmap used;
    g4_strmap_init(&used, g->n_node * 4 + 16);
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_input; k++)
            if (g->node[i]->input[k] && g->node[i]->input[k][0])
                g4_strmap_put(&used, g->node[i]->input[k], 1);
    g4_strmap quantized;
    g4_strmap_init(&quantized, (size_t)rw->n_jobs + 1);
    for (int j = 0; j < rw->n_jobs; j++) g4_strmap_put(&quantized, rw->jobs[j].w_name, j);
    size_t w = 0;
    for (size_t i = 0; i < g->n_initializer; i++) {
        Onnx__TensorProto *t = g->initializer[i];
        if (t->name && g4_strmap_get(&quantized, t->name) >= 0 &&
            g4_strmap_get(&used, t->name) < 0 && !is_graph_output(g, t->name) &&
            !is_graph_input(g, t->name)) {
            onnx__tensor_proto__free_unpacked(t, NULL);
            continue;
        }
        g->initializer[w++] = t;
    }
    g->n_initializer = w;
    g4_strmap_free(&used);
    g4_strmap_free(&quantized);
    // New initializers after the old ones, per weight in node order (as Olive registers them).
    g->initializer = g4_realloc(
        g->initializer, sizeof(*g->initializer) * (g->n_initializer + 3 * (size_t)rw->n_jobs + 1));
    for (int j = 0; j < rw->n_jobs; j++)
        for (int r = 0; r < 3; r++) g->initializer[g->n_initializer++] = rw->jobs[j].tp[r];
    ensure_msft_opset(rw->mp);
}

static uint64_t tensor_proto_nbytes(const Onnx__TensorProto *t) {
    uint64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++) n *= (uint64_t)t->dims[d];
    return n * (uint64_t)g4_dtype_bits(t->data_type) / 8;
}

// A calibration name (with or without the component prefix) names the file's weight nm.
static int same_weight(const char *cal, const char *nm) {
    const char *dot = strchr(nm, '.');
    return !strcmp(cal, nm) || (dot && !strcmp(cal, dot + 1));
}

g4_q4_arrays g4_q4_arrays_new(const char *name, int K, int N) {
    const g4_q4_shape sh = g4_q4_shape_of(K, N, G4_Q4_BLOCK);
    return (g4_q4_arrays){name ? g4_strdup(name) : NULL,
                          K,
                          N,
                          g4_malloc((size_t)sh.q_bytes),
                          g4_malloc(sizeof(uint16_t) * (size_t)sh.n_scales),
                          g4_malloc((size_t)sh.zp_bytes)};
}

void g4_q4_arrays_free(g4_q4_arrays *a) {
    free(a->name), free(a->q), free(a->scales), free(a->zp);
    memset(a, 0, sizeof *a);
}

// o->repl's entry for initializer nm, or NULL.
static const g4_q4_repl *find_repl(const g4_q4_write_opts *o, const char *nm) {
    for (int r = 0; r < o->n_repl; r++)
        if (same_weight(o->repl[r].name, nm)) return &o->repl[r];
    return NULL;
}

static int reads(const Onnx__NodeProto *n, const char *name) {
    for (size_t k = 0; k < n->n_input; k++)
        if (n->input[k] && !strcmp(n->input[k], name)) return 1;
    return 0;
}

// o->repl's initializers (before the rewrite): fp16 of n elements, read by one node; a fold
// target's node's first output read by MatMuls only (g4_q4_write_opts.repl).
static int check_repl(const Onnx__GraphProto *g, const g4_q4_write_opts *o, const char *path) {
    for (int r = 0; r < o->n_repl; r++) {
        const g4_q4_repl *rp = &o->repl[r];
        const Onnx__TensorProto *t = NULL;
        for (size_t i = 0; i < g->n_initializer && !t; i++)
            if (g->initializer[i]->name && same_weight(rp->name, g->initializer[i]->name))
                t = g->initializer[i];
        if (!t) return g4_fail(G4_EUSER, "%s: no initializer %s to rewrite", path, rp->name);
        if (t->data_type != G4_DT_FLOAT16 || tensor_proto_nbytes(t) != 2 * (uint64_t)rp->n)
            return g4_fail(G4_EUSER, "%s: %s is %s of %llu bytes, expected float16 [%d]", path,
                           t->name, g4_dtype_name(t->data_type),
                           (unsigned long long)tensor_proto_nbytes(t), rp->n);
        const Onnx__NodeProto *rd = NULL;
        int readers = 0;
        for (size_t i = 0; i < g->n_node; i++)
            if (reads(g->node[i], t->name)) readers++, rd = g->node[i];
        if (readers != 1 || !rd->n_output || !rd->output[0])
            return g4_fail(G4_EUSER,
                           "%s: %s is read by %d nodes, expected 1 with an output (a shared "
                           "initializer: its rewrite would reach other layers)",
                           path, t->name, readers);
        const char *out = rd->output[0];
        if (!rp->fold) continue;
        if (is_graph_output(g, out))
            return g4_fail(G4_EUSER, "%s: %s's node writes the graph output %s", path, t->name,
                           out);
        for (size_t i = 0; i < g->n_node; i++)
            if (reads(g->node[i], out) &&
                (!g->node[i]->op_type || strcmp(g->node[i]->op_type, "MatMul")))
                return g4_fail(G4_EUSER,
                               "%s: %s's node output %s is read by a %s node, expected MatMuls "
                               "only (the fold is exact only for linears)",
                               path, t->name, out,
                               g->node[i]->op_type ? g->node[i]->op_type : "(no op)");
    }
    return G4_OK;
}

// prefix: the component's tensor-name prefix ("decoder."), for --keep patterns written without it.
static int write_model(const g4_onnx_model *src, const char *out_dir, const char *out_name,
                       const char *prefix, const g4_q4_write_opts *o, g4_q4_write_stats *st) {
    memset(st, 0, sizeof *st);
    const int block = o->block ? o->block : G4_Q4_BLOCK;
    if (block < 16 || block > G4_KQUANT_MAX_BLOCK || (block & (block - 1)))
        return g4_fail(G4_EUSER, "block size %d, expected a power of two in [16, %d]", block,
                       G4_KQUANT_MAX_BLOCK);
    char *bytes;
    size_t size;
    int rc = g4_read_file_max(src->path, G4_MAX_ONNX_BYTES, &bytes, &size);
    if (rc) return rc;
    rewrite rw = {0};
    rw.mp = onnx__model_proto__unpack(NULL, size, (const uint8_t *)bytes);
    free(bytes);
    if (!rw.mp || !rw.mp->graph) {
        rewrite_free(&rw);
        return g4_fail(G4_EUSER, "%s: not a valid ONNX ModelProto", src->path);
    }
    if (has_subgraphs(rw.mp->graph)) {
        rewrite_free(&rw);
        return g4_fail(G4_EUSER,
                       "%s: the graph has subgraphs (If/Loop/Scan); g4cu quantize "
                       "rewrites flat graphs only",
                       src->path);
    }
    if ((rc = check_repl(rw.mp->graph, o, src->path)) || (rc = plan(&rw, src, prefix, o, st))) {
        rewrite_free(&rw);
        return rc;
    }
    apply(&rw, block);
    Onnx__GraphProto *g = rw.mp->graph;

    // Layout of every initializer, old and new.
    const int n_init = (int)g->n_initializer;
    uint64_t *sizes = g4_malloc(sizeof(uint64_t) * (size_t)(n_init + 1));
    uint64_t *offs = g4_malloc(sizeof(uint64_t) * (size_t)(n_init + 1));
    for (int i = 0; i < n_init; i++) sizes[i] = tensor_proto_nbytes(g->initializer[i]);
    const uint64_t total = g4_ext_layout(sizes, n_init, offs);
    g4_strmap index; // name -> position, to place the new tensors
    g4_strmap_init(&index, (size_t)n_init + 1);
    for (int i = 0; i < n_init; i++) g4_strmap_put(&index, g->initializer[i]->name, i);

    data_file df;
    df.location = g4_sprintf("%s.data", out_name);
    char *model_path = g4_path_join(out_dir, out_name);
    char *data_path = g4_path_join(out_dir, df.location);
    df.path = data_path;
    df.fd = open(data_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (df.fd < 0)
        rc = g4_fail(G4_EUSER, "%s: cannot create: %s", data_path, strerror(errno));
    else if (ftruncate(df.fd, (off_t)total) != 0) // gaps read as zeros
        rc = g4_fail(G4_EUSER, "%s: cannot size to %llu bytes: %s", data_path,
                     (unsigned long long)total, strerror(errno));

    // Existing initializers: same bytes, new place.
    g4_strmap is_new;
    g4_strmap_init(&is_new, 3 * (size_t)rw.n_jobs + 1);
    for (int j = 0; j < rw.n_jobs; j++)
        for (int r = 0; r < 3; r++) g4_strmap_put(&is_new, rw.jobs[j].tp[r]->name, 1);
    for (int i = 0; i < n_init && rc == G4_OK; i++) {
        Onnx__TensorProto *t = g->initializer[i];
        if (g4_strmap_get(&is_new, t->name) >= 0) continue;
        const g4_q4_repl *rp = find_repl(o, t->name);
        if (rp) { // sizes[i] == 2 rp->n (check_repl)
            rc = place(t, rp->data, sizes[i], offs[i], &df);
            st->n_replaced++;
            continue;
        }
        const g4_tensor *s = g4_onnx_tensor(src, t->name);
        G4_ASSERT(s && s->nbytes == sizes[i]);
        rc = place(t, s->data, s->nbytes, offs[i], &df);
    }
    g4_strmap_free(&is_new);
    if (rc == G4_OK && st->n_replaced != o->n_repl)
        rc = g4_fail(G4_EUSER, "%s: %d initializers rewritten, %d asked (a name given twice?)",
                     src->path, st->n_replaced, o->n_repl);

    // Quantized weights, one at a time.
    st->names = g4_calloc((size_t)rw.n_jobs + 1, sizeof(char *));
    g4_progress bar;
    g4_progress_start(&bar, rw.n_jobs ? o->progress : NULL, "quantize", rw.n_jobs, 0);
    for (int j = 0; j < rw.n_jobs && rc == G4_OK; j++) {
        const wjob *w = &rw.jobs[j];
        const g4_q4_shape sh = g4_q4_shape_of(w->K, w->N, block);
        g4_progress_note(&bar, "%s [%d, %d]", w->w_name, w->K, w->N);
        uint8_t *q = g4_malloc((size_t)sh.q_bytes);
        uint16_t *sc = g4_malloc((size_t)sh.n_scales * 2);
        uint8_t *zp = g4_malloc((size_t)sh.zp_bytes);
        const float *imp = NULL, *imp_mean = NULL;
        const g4_q4_arrays *pre = NULL;
        for (int i = 0; i < o->n_imp && !imp; i++)
            if (same_weight(o->imp_names[i], w->w_name))
                imp = o->imp[i], imp_mean = o->imp_mean ? o->imp_mean[i] : NULL;
        for (int i = 0; i < o->n_pre && !pre; i++)
            if (same_weight(o->pre[i].name, w->w_name)) pre = &o->pre[i];
        if (pre && (pre->K != w->K || pre->N != w->N))
            rc = g4_fail(G4_EINTERNAL, "%s: quantized as [%d, %d], the file has [%d, %d]",
                         w->w_name, pre->K, pre->N, w->K, w->N);
        else if (pre) {
            memcpy(q, pre->q, (size_t)sh.q_bytes);
            memcpy(sc, pre->scales, (size_t)sh.n_scales * 2);
            memcpy(zp, pre->zp, (size_t)sh.zp_bytes);
        } else if (o->method == G4_QM_RTN && !imp)
            rc = g4_q4_quantize_rtn(w->src->data, G4_DT_FLOAT16, w->K, w->N, block, q, sc, zp);
        else
            rc = g4_q4_quantize_imx(w->src->data, G4_DT_FLOAT16, w->K, w->N, block, o->n_threads,
                                    imp, imp_mean, q, sc, zp);
        st->n_calibrated += imp || pre;
        const void *data[3] = {q, sc, zp};
        for (int r = 0; r < 3 && rc == G4_OK; r++) {
            int i = g4_strmap_get(&index, w->tp[r]->name);
            rc = place(w->tp[r], data[r], sizes[i], offs[i], &df);
        }
        free(q);
        free(sc);
        free(zp);
        st->names[st->n_weights++] = g4_strdup(w->w_name);
        g4_progress_step(&bar);
    }
    g4_progress_end(&bar);
    st->n_quantized = rw.n_convs;
    st->data_bytes = total;
    if (df.fd >= 0 && close(df.fd) != 0 && rc == G4_OK)
        rc = g4_fail(G4_EUSER, "%s: write failed: %s", data_path, strerror(errno));

    if (rc == G4_OK) {
        size_t n = onnx__model_proto__get_packed_size(rw.mp);
        uint8_t *buf = g4_malloc(n ? n : 1);
        onnx__model_proto__pack(rw.mp, buf);
        rc = g4_write_file_atomic(model_path, buf, n);
        free(buf);
    }
    g4_strmap_free(&index);
    free((char *)df.location);
    free(model_path);
    free(data_path);
    free(sizes);
    free(offs);
    rewrite_free(&rw);
    if (rc) g4_q4_write_stats_free(st);
    return rc;
}

int g4_q4_write_model(const g4_onnx_model *src, const char *out_dir, const char *out_name,
                      const g4_q4_write_opts *o, g4_q4_write_stats *st) {
    return write_model(src, out_dir, out_name, NULL, o, st);
}

// --- the package --------------------------------------------------------------------------------

typedef struct {
    char **skip; // package-relative paths the writer replaces
    int n;
} skip_set;

static int skip_file(const char *rel, void *ctx) {
    const skip_set *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(rel, s->skip[i])) return 1;
    return 0;
}

// The package's decoder files: its model.onnx and every external-data file it names.
static void decoder_files(const g4_package *p, skip_set *s) {
    const char *rel = p->genai.decoder_file;
    const char *slash = strrchr(rel, '/');
    char *dir = slash ? g4_strndup(rel, (size_t)(slash - rel)) : g4_strdup("");
    const g4_onnx_model *m = p->comp[G4_COMP_DECODER].model;
    s->skip = g4_calloc((size_t)m->n_tensors + 2, sizeof(char *));
    s->skip[s->n++] = g4_strdup(rel);
    for (int i = 0; i < m->n_tensors; i++) {
        if (!m->tensors[i].external) continue;
        char *r = dir[0] ? g4_sprintf("%s/%s", dir, m->tensors[i].location)
                         : g4_strdup(m->tensors[i].location);
        if (skip_file(r, s))
            free(r);
        else
            s->skip[s->n++] = r;
    }
    free(dir);
}

static int check_output(const char *dir, const g4_q4_write_stats *st) {
    g4_package *q;
    int rc = g4_package_open(dir, &q);
    if (rc) return rc;
    const g4_component *c = g4_package_component(q, G4_COMP_DECODER);
    for (int i = 0; i < st->n_weights && rc == G4_OK; i++) {
        g4_linear li;
        rc = g4_q4_linear_get(c, st->names[i], -1, -1, &li);
    }
    g4_package_close(q);
    return rc;
}

// The temporary directory of a run: "<out>.tmp-<pid>" beside out, so that a run that was killed
// leaves a name the next run recognises.
static char *tmp_dir_name(const char *out, long pid) {
    return g4_sprintf("%s.tmp-%ld", out, pid);
}

// Removes "<out>.tmp-<pid>" directories beside out whose process is gone (a killed quantize
// leaves its multi-GB temporary directory; nothing else would ever clean it), saying so on log.
static void remove_stale_tmp(const char *out, FILE *log) {
    const char *slash = strrchr(out, '/');
    char *dir = !slash         ? g4_strdup(".")
                : slash == out ? g4_strdup("/")
                               : g4_strndup(out, (size_t)(slash - out));
    const char *base = slash ? slash + 1 : out;
    char *prefix = g4_sprintf("%s.tmp-", base);
    const size_t np = strlen(prefix);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, np) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(e->d_name + np, &end, 10);
        if (*end || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; // alive (or not ours to judge)
        char *path = g4_path_join(dir, e->d_name);
        if (g4_is_dir(path) && g4_tree_remove(path) == G4_OK && log)
            fprintf(log,
                    "g4cu quantize: removed %s, left by an interrupted run (process %ld is gone)\n",
                    path, pid);
        free(path);
    }
    if (d) closedir(d);
    free(prefix);
    free(dir);
}

int g4_q4_write_package(const char *pkg_dir, const char *out_dir, const g4_q4_write_opts *o,
                        g4_q4_write_stats *st) {
    memset(st, 0, sizeof *st);
    struct stat sb;
    if (lstat(out_dir, &sb) == 0)
        return g4_fail(G4_EUSER, "%s: already exists (g4cu quantize writes a new directory)",
                       out_dir);
    g4_package *p;
    int rc = g4_package_open(pkg_dir, &p);
    if (rc) return rc;
    // Not inside the package it is made from (compared by device and inode, not by name).
    if ((rc = g4_check_output_dir(out_dir))) {
        g4_package_close(p);
        return rc;
    }
    const g4_component *dec = g4_package_component(p, G4_COMP_DECODER);
    char *out = g4_strdup(out_dir);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    remove_stale_tmp(out, o->log);
    char *tmp = tmp_dir_name(out, (long)getpid());
    skip_set skip = {0};
    decoder_files(p, &skip);
    if (mkdir(tmp, 0755) != 0) {
        rc = g4_fail(G4_EUSER, "%s: cannot create a directory beside it: %s", out, strerror(errno));
        free(tmp);
        tmp = NULL;
    }
    if (rc == G4_OK) rc = g4_tree_copy(pkg_dir, tmp, skip_file, &skip);
    if (rc == G4_OK) {
        const char *rel = p->genai.decoder_file, *slash = strrchr(rel, '/');
        char *dir = slash ? g4_sprintf("%s/%.*s", tmp, (int)(slash - rel), rel) : g4_strdup(tmp);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            rc = g4_fail(G4_EUSER, "%s: cannot create: %s", dir, strerror(errno));
        else
            rc = write_model(dec->model, dir, slash ? slash + 1 : rel, dec->prefix, o, st);
        free(dir);
    }
    g4_package_close(p);
    if (rc == G4_OK) rc = check_output(tmp, st);
    if (rc == G4_OK && rename(tmp, out) != 0)
        rc = g4_fail(G4_EUSER, "%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
    if (rc != G4_OK && tmp) {
        char *msg = g4_strdup(g4_error());
        g4_tree_remove(tmp);
        g4_fail(rc, "%s", msg);
        free(msg);
        g4_q4_write_stats_free(st);
    }
    for (int i = 0; i < skip.n; i++) free(skip.skip[i]);
    free(skip.skip);
    free(tmp);
    free(out);
    return rc;
}
