// onnx_model.c: model.onnx -> validated tensor table + graph (see onnx_model.h).
// The protobuf is decoded by protobuf-c from our own loader/onnx.proto subset; the decoded
// message stays alive with the model, and names point into it.
#include "loader/onnx_model.h"

#include <math.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "onnx.pb-c.h"

typedef struct {
    char *location; // as written in the model
    g4_mapped_file file;
} g4_ext_file;

struct g4_onnx_private {
    Onnx__ModelProto *proto;
    uint8_t *bytes; // model.onnx contents (the proto borrows nothing from it; kept for clarity)
    g4_ext_file *ext;
    int n_ext;
    void **owned; // buffers converted from typed fields
    int n_owned;
    g4_strmap tensor_index;   // name -> tensors[]
    g4_strmap producer_index; // value name -> nodes[]
    // consumers: CSR over value ids
    g4_strmap value_index; // value name -> value id
    int *cons_start;       // [n_values + 1]
    int *cons_nodes;       // node indices
};

static const char *S(const char *s) { return s ? s : ""; }

int g4_dtype_bits(int dtype) {
    switch (dtype) {
    case G4_DT_FLOAT: return 32;
    case G4_DT_UINT8: return 8;
    case G4_DT_INT8: return 8;
    case G4_DT_UINT16: return 16;
    case G4_DT_INT16: return 16;
    case G4_DT_INT32: return 32;
    case G4_DT_INT64: return 64;
    case G4_DT_BOOL: return 8;
    case G4_DT_FLOAT16: return 16;
    case G4_DT_DOUBLE: return 64;
    case G4_DT_UINT32: return 32;
    case G4_DT_UINT64: return 64;
    case G4_DT_BFLOAT16: return 16;
    case G4_DT_UINT4: return 4;
    case G4_DT_INT4: return 4;
    default: return 0;
    }
}

const char *g4_dtype_name(int dtype) {
    switch (dtype) {
    case G4_DT_FLOAT: return "float32";
    case G4_DT_UINT8: return "uint8";
    case G4_DT_INT8: return "int8";
    case G4_DT_UINT16: return "uint16";
    case G4_DT_INT16: return "int16";
    case G4_DT_INT32: return "int32";
    case G4_DT_INT64: return "int64";
    case G4_DT_STRING: return "string";
    case G4_DT_BOOL: return "bool";
    case G4_DT_FLOAT16: return "float16";
    case G4_DT_DOUBLE: return "float64";
    case G4_DT_UINT32: return "uint32";
    case G4_DT_UINT64: return "uint64";
    case G4_DT_BFLOAT16: return "bfloat16";
    case G4_DT_UINT4: return "uint4";
    case G4_DT_INT4: return "int4";
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "dtype(%d)", dtype);
        return buf;
    }
    }
}

const char *g4_tensor_shape_str(const g4_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

// Strict decimal parse of an external_data offset/length value.
static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p)) return 0;
        if (!g4_mul_u64(v, 10, &v) || !g4_add_u64(v, (uint64_t)(*p - '0'), &v)) return 0;
    }
    *out = v;
    return 1;
}

// A location must name a file inside the model's directory.
static int location_ok(const char *loc) {
    if (!loc || !*loc || loc[0] == '/') return 0;
    const char *p = loc;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (len == 0) return 0;
        p += len;
        if (*p == '/') p++;
    }
    return 1;
}

static void *own(struct g4_onnx_private *pv, size_t n) {
    void *p = g4_calloc(1, n);
    pv->owned = g4_realloc(pv->owned, sizeof(void *) * (size_t)(pv->n_owned + 1));
    pv->owned[pv->n_owned++] = p;
    return p;
}

static int map_location(g4_onnx_model *m, const char *loc, g4_mapped_file **out) {
    struct g4_onnx_private *pv = m->priv;
    for (int i = 0; i < pv->n_ext; i++)
        if (strcmp(pv->ext[i].location, loc) == 0) {
            *out = &pv->ext[i].file;
            return G4_OK;
        }
    char *path = g4_path_join(m->dir, loc);
    g4_mapped_file f;
    int rc = g4_map_file(path, &f);
    free(path);
    if (rc) return rc;
    pv->ext = g4_realloc(pv->ext, sizeof(g4_ext_file) * (size_t)(pv->n_ext + 1));
    pv->ext[pv->n_ext].location = g4_strdup(loc);
    pv->ext[pv->n_ext].file = f;
    *out = &pv->ext[pv->n_ext++].file;
    return G4_OK;
}

// Fills t from a TensorProto: shape, dtype, size checks, then the bytes.
static int load_tensor(g4_onnx_model *m, const Onnx__TensorProto *tp, const char *name,
                       g4_tensor_kind kind, g4_tensor *t) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->kind = kind;
    t->dtype = tp->has_data_type ? tp->data_type : 0;
    const char *mp = m->path;
    if (!name || !*name) return g4_fail(G4_EUSER, "%s: an initializer has no name", mp);
    int bits = g4_dtype_bits(t->dtype);
    if (bits == 0)
        return g4_fail(G4_EUSER, "%s: tensor '%s': unknown or unsupported dtype %d", mp, name,
                       t->dtype);
    if (tp->n_dims > G4_MAX_DIMS)
        return g4_fail(G4_EUSER, "%s: tensor '%s': %zu dims, at most %d supported", mp, name,
                       tp->n_dims, G4_MAX_DIMS);
    t->ndim = (int)tp->n_dims;
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (tp->dims[d] < 0)
            return g4_fail(G4_EUSER, "%s: tensor '%s': negative dim %lld", mp, name,
                           (long long)tp->dims[d]);
        t->dims[d] = tp->dims[d];
        if (!g4_mul_u64(numel, (uint64_t)tp->dims[d], &numel))
            return g4_fail(G4_EUSER, "%s: tensor '%s': element count overflows", mp, name);
    }
    t->numel = numel;
    uint64_t nbits;
    if (!g4_mul_u64(numel, (uint64_t)bits, &nbits))
        return g4_fail(G4_EUSER, "%s: tensor '%s': byte size overflows", mp, name);
    t->nbytes = (nbits + 7) / 8; // 4-bit types pack two per byte, first in the low nibble
    char shp[160];
    int external = tp->has_data_location &&
                   tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (external) {
        if (tp->has_raw_data && tp->raw_data.len)
            return g4_fail(G4_EUSER, "%s: tensor '%s': both raw_data and external data", mp, name);
        const char *loc = NULL, *off_s = NULL, *len_s = NULL;
        for (size_t i = 0; i < tp->n_external_data; i++) {
            const char *k = S(tp->external_data[i]->key), *v = tp->external_data[i]->value;
            if (strcmp(k, "location") == 0) loc = v;
            else if (strcmp(k, "offset") == 0) off_s = v;
            else if (strcmp(k, "length") == 0) len_s = v;
        }
        if (!loc)
            return g4_fail(G4_EUSER, "%s: tensor '%s': external data without a location", mp,
                           name);
        if (!location_ok(loc))
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': external location '%s' must be a relative path "
                           "inside the model directory",
                           mp, name, loc);
        uint64_t off = 0, len = 0;
        if (off_s && !parse_u64(off_s, &off))
            return g4_fail(G4_EUSER, "%s: tensor '%s': external offset '%s' is not a number", mp,
                           name, off_s);
        if (len_s && !parse_u64(len_s, &len))
            return g4_fail(G4_EUSER, "%s: tensor '%s': external length '%s' is not a number", mp,
                           name, len_s);
        g4_mapped_file *f;
        int rc = map_location(m, loc, &f);
        if (rc) {
            g4_error_prefix("%s: tensor '%s'", mp, name);
            return rc;
        }
        if (off > f->size)
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': external offset %llu is past the end of %s (%llu "
                           "bytes; truncated file?)",
                           mp, name, (unsigned long long)off, loc, (unsigned long long)f->size);
        if (!len_s) len = f->size - off;
        uint64_t end;
        if (!g4_add_u64(off, len, &end) || end > f->size)
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': external offset %llu + length %llu runs past the "
                           "end of %s (%llu bytes; truncated file?)",
                           mp, name, (unsigned long long)off, (unsigned long long)len, loc,
                           (unsigned long long)f->size);
        if (len != t->nbytes)
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': external length %llu bytes, but %s %s needs %llu", mp,
                           name, (unsigned long long)len, g4_dtype_name(t->dtype),
                           g4_tensor_shape_str(t, shp, sizeof shp),
                           (unsigned long long)t->nbytes);
        t->external = 1;
        t->location = loc;
        t->offset = off;
        t->data = len ? f->data + off : NULL;
        m->external_bytes += len;
        return G4_OK;
    }
    if (tp->has_raw_data) {
        if (tp->raw_data.len != t->nbytes)
            return g4_fail(G4_EUSER, "%s: tensor '%s': raw_data has %zu bytes, but %s %s needs %llu",
                           mp, name, tp->raw_data.len, g4_dtype_name(t->dtype),
                           g4_tensor_shape_str(t, shp, sizeof shp),
                           (unsigned long long)t->nbytes);
        t->data = t->nbytes ? tp->raw_data.data : NULL;
        return G4_OK;
    }
    if (numel == 0) return G4_OK;
    // Typed fields (onnx.in.proto): float_data for FLOAT; int32_data for the 8/16-bit types,
    // fp16/bf16 bit patterns and bool; int64_data; double_data; uint64_data for UINT32/UINT64.
    size_t have = 0;
    uint8_t *dst = own(m->priv, (size_t)t->nbytes);
    switch (t->dtype) {
    case G4_DT_FLOAT:
        have = tp->n_float_data;
        if (have == numel) memcpy(dst, tp->float_data, (size_t)t->nbytes);
        break;
    case G4_DT_INT64:
        have = tp->n_int64_data;
        if (have == numel) memcpy(dst, tp->int64_data, (size_t)t->nbytes);
        break;
    case G4_DT_DOUBLE:
        have = tp->n_double_data;
        if (have == numel) memcpy(dst, tp->double_data, (size_t)t->nbytes);
        break;
    case G4_DT_UINT32:
    case G4_DT_UINT64:
        have = tp->n_uint64_data;
        if (have == numel)
            for (uint64_t i = 0; i < numel; i++) {
                if (t->dtype == G4_DT_UINT32) {
                    uint32_t v = (uint32_t)tp->uint64_data[i];
                    memcpy(dst + 4 * i, &v, 4);
                } else {
                    memcpy(dst + 8 * i, &tp->uint64_data[i], 8);
                }
            }
        break;
    case G4_DT_UINT4:
    case G4_DT_INT4: // int32_data holds the packed bytes
        have = tp->n_int32_data;
        if (have == t->nbytes)
            for (uint64_t i = 0; i < t->nbytes; i++) dst[i] = (uint8_t)tp->int32_data[i];
        if (have == t->nbytes) have = numel;
        break;
    default: // 8/16/32-bit ints, bool, fp16, bf16: one int32 per element
        have = tp->n_int32_data;
        if (have == numel) {
            int eb = bits / 8;
            for (uint64_t i = 0; i < numel; i++) {
                uint32_t v = (uint32_t)tp->int32_data[i];
                memcpy(dst + (size_t)eb * i, &v, (size_t)eb); // little-endian low bytes
            }
        }
        break;
    }
    if (have != numel)
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': no raw_data or external data, and the typed data has "
                       "%zu values where %s %s needs %llu",
                       mp, name, have, g4_dtype_name(t->dtype),
                       g4_tensor_shape_str(t, shp, sizeof shp), (unsigned long long)numel);
    t->data = dst;
    return G4_OK;
}

static void load_value_info(const Onnx__ValueInfoProto *vp, g4_value_info *v) {
    memset(v, 0, sizeof *v);
    v->name = S(vp->name);
    v->ndim = -1;
    if (!vp->type || vp->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return;
    const Onnx__TypeProto__Tensor *tt = vp->type->tensor_type;
    v->elem_type = tt->has_elem_type ? tt->elem_type : 0;
    if (!tt->shape) return;
    v->ndim = tt->shape->n_dim > G4_MAX_DIMS ? G4_MAX_DIMS : (int)tt->shape->n_dim;
    for (int d = 0; d < v->ndim; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            v->dims[d] = dim->dim_value;
        } else {
            v->dims[d] = -1;
            v->dim_params[d] = dim->value_case ==
                                       ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                   ? S(dim->dim_param)
                                   : "";
        }
    }
}

static int add_tensor_name(g4_onnx_model *m, int idx) {
    if (!g4_strmap_put(&m->priv->tensor_index, m->tensors[idx].name, idx))
        return g4_fail(G4_EUSER, "%s: duplicate tensor name '%s'", m->path, m->tensors[idx].name);
    return G4_OK;
}

static int build(g4_onnx_model *m) {
    struct g4_onnx_private *pv = m->priv;
    Onnx__ModelProto *mp = pv->proto;
    if (!mp->graph) return g4_fail(G4_EUSER, "%s: ModelProto has no graph", m->path);
    const Onnx__GraphProto *g = mp->graph;
    m->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    m->producer = S(mp->producer_name);
    m->n_opsets = (int)mp->n_opset_import;
    m->opset_domains = g4_calloc(mp->n_opset_import, sizeof(char *));
    m->opset_versions = g4_calloc(mp->n_opset_import, sizeof(int64_t));
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        m->opset_domains[i] = S(mp->opset_import[i]->domain);
        m->opset_versions[i] = mp->opset_import[i]->version;
    }

    // Constant nodes carry small tensors too; count them for the table.
    size_t n_const = 0;
    for (size_t i = 0; i < g->n_node; i++)
        if (strcmp(S(g->node[i]->op_type), "Constant") == 0 && S(g->node[i]->domain)[0] == 0)
            n_const++;
    m->tensors = g4_calloc(g->n_initializer + n_const, sizeof(g4_tensor));
    g4_strmap_init(&pv->tensor_index, g->n_initializer + n_const);
    for (size_t i = 0; i < g->n_initializer; i++) {
        int rc = load_tensor(m, g->initializer[i], g->initializer[i]->name, G4_TENSOR_INITIALIZER,
                             &m->tensors[m->n_tensors]);
        if (rc) return rc;
        if ((rc = add_tensor_name(m, m->n_tensors++))) return rc;
    }

    m->n_nodes = (int)g->n_node;
    m->nodes = g4_calloc(g->n_node, sizeof(g4_node));
    g4_strmap_init(&pv->producer_index, g->n_node * 2);
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *np = g->node[i];
        g4_node *n = &m->nodes[i];
        n->name = S(np->name);
        n->op_type = S(np->op_type);
        n->domain = S(np->domain);
        n->n_inputs = (int)np->n_input;
        n->inputs = (const char **)np->input;
        n->n_outputs = (int)np->n_output;
        n->outputs = (const char **)np->output;
        for (int k = 0; k < n->n_inputs; k++)
            if (!n->inputs[k]) n->inputs[k] = "";
        for (int k = 0; k < n->n_outputs; k++) {
            if (!n->outputs[k]) n->outputs[k] = "";
            if (n->outputs[k][0] && !g4_strmap_put(&pv->producer_index, n->outputs[k], (int)i))
                return g4_fail(G4_EUSER, "%s: value '%s' is produced by two nodes", m->path,
                               n->outputs[k]);
        }
        n->n_attrs = (int)np->n_attribute;
        n->attrs = g4_calloc(np->n_attribute, sizeof(g4_attr));
        for (size_t a = 0; a < np->n_attribute; a++) {
            const Onnx__AttributeProto *ap = np->attribute[a];
            g4_attr *at = &n->attrs[a];
            at->name = S(ap->name);
            at->type = ap->has_type ? (int)ap->type : 0;
            at->f = ap->f;
            at->i = ap->i;
            at->s = ap->s.data;
            at->s_len = ap->s.len;
            at->floats = ap->floats;
            at->n_floats = ap->n_floats;
            at->ints = ap->ints;
            at->n_ints = ap->n_ints;
        }
        if (strcmp(n->op_type, "Constant") == 0 && n->domain[0] == 0) {
            if (n->n_outputs < 1 || !n->outputs[0][0])
                return g4_fail(G4_EUSER, "%s: Constant node '%s' has no output", m->path, n->name);
            g4_tensor *t = &m->tensors[m->n_tensors];
            const Onnx__AttributeProto *val = NULL;
            for (size_t a = 0; a < np->n_attribute; a++)
                if (np->attribute[a]->t && strcmp(S(np->attribute[a]->name), "value") == 0)
                    val = np->attribute[a];
            if (val) {
                int rc = load_tensor(m, val->t, n->outputs[0], G4_TENSOR_CONSTANT, t);
                if (rc) return rc;
                for (int a = 0; a < n->n_attrs; a++)
                    if (strcmp(n->attrs[a].name, "value") == 0) n->attrs[a].t = t;
                if ((rc = add_tensor_name(m, m->n_tensors++))) return rc;
            }
            // value_float / value_int(s) constants are left to the node's attributes.
        }
    }

    m->n_inputs = (int)g->n_input;
    m->inputs = g4_calloc(g->n_input, sizeof(g4_value_info));
    for (size_t i = 0; i < g->n_input; i++) load_value_info(g->input[i], &m->inputs[i]);
    m->n_outputs = (int)g->n_output;
    m->outputs = g4_calloc(g->n_output, sizeof(g4_value_info));
    for (size_t i = 0; i < g->n_output; i++) load_value_info(g->output[i], &m->outputs[i]);

    // Consumer index (CSR): value id per distinct input name, then node lists.
    size_t n_uses = 0;
    for (int i = 0; i < m->n_nodes; i++) n_uses += (size_t)m->nodes[i].n_inputs;
    g4_strmap_init(&pv->value_index, n_uses);
    int n_values = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_inputs; k++)
            if (m->nodes[i].inputs[k][0] && g4_strmap_put(&pv->value_index, m->nodes[i].inputs[k],
                                                          n_values))
                n_values++;
    pv->cons_start = g4_calloc((size_t)n_values + 1, sizeof(int));
    pv->cons_nodes = g4_calloc(n_uses, sizeof(int));
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_inputs; k++)
            if (m->nodes[i].inputs[k][0])
                pv->cons_start[g4_strmap_get(&pv->value_index, m->nodes[i].inputs[k]) + 1]++;
    for (int v = 0; v < n_values; v++) pv->cons_start[v + 1] += pv->cons_start[v];
    int *fill = g4_calloc((size_t)n_values + 1, sizeof(int));
    for (int i = 0; i < m->n_nodes; i++) {
        for (int k = 0; k < m->nodes[i].n_inputs; k++) {
            if (!m->nodes[i].inputs[k][0]) continue;
            int v = g4_strmap_get(&pv->value_index, m->nodes[i].inputs[k]);
            int *slot = &pv->cons_nodes[pv->cons_start[v] + fill[v]];
            // a node that reads one value twice is listed once
            if (fill[v] == 0 || slot[-1] != i) {
                *slot = i;
                fill[v]++;
            }
        }
    }
    // Compact away the duplicate slots left by nodes that read a value twice.
    int w = 0;
    for (int v = 0; v < n_values; v++) {
        int s = pv->cons_start[v];
        pv->cons_start[v] = w;
        for (int j = 0; j < fill[v]; j++) pv->cons_nodes[w++] = pv->cons_nodes[s + j];
    }
    pv->cons_start[n_values] = w;
    free(fill);
    return G4_OK;
}

int g4_onnx_parse(const uint8_t *bytes, size_t size, const char *path, const char *dir,
                  g4_onnx_model **out) {
    *out = NULL;
    g4_onnx_model *m = g4_calloc(1, sizeof *m);
    m->path = g4_strdup(path);
    m->dir = g4_strdup(dir);
    m->priv = g4_calloc(1, sizeof *m->priv);
    m->priv->proto = onnx__model_proto__unpack(NULL, size, bytes);
    if (!m->priv->proto) {
        g4_onnx_close(m);
        return g4_fail(G4_EUSER, "%s: not a valid ONNX ModelProto (protobuf decode failed)", path);
    }
    int rc = build(m);
    if (rc) {
        g4_onnx_close(m);
        return rc;
    }
    *out = m;
    return G4_OK;
}

int g4_onnx_open(const char *path, g4_onnx_model **out) {
    *out = NULL;
    char *bytes;
    size_t size;
    int rc = g4_read_file_max(path, G4_MAX_ONNX_BYTES, &bytes, &size);
    if (rc) return rc;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? g4_strndup(path, (size_t)(slash - path)) : g4_strdup(".");
    if (slash == path) {
        free(dir);
        dir = g4_strdup("/");
    }
    rc = g4_onnx_parse((const uint8_t *)bytes, size, path, dir, out);
    free(dir);
    if (rc) {
        free(bytes);
        return rc;
    }
    (*out)->priv->bytes = (uint8_t *)bytes;
    return G4_OK;
}

void g4_onnx_close(g4_onnx_model *m) {
    if (!m) return;
    struct g4_onnx_private *pv = m->priv;
    if (pv) {
        if (pv->proto) onnx__model_proto__free_unpacked(pv->proto, NULL);
        for (int i = 0; i < pv->n_ext; i++) {
            g4_unmap_file(&pv->ext[i].file);
            free(pv->ext[i].location);
        }
        free(pv->ext);
        for (int i = 0; i < pv->n_owned; i++) free(pv->owned[i]);
        free(pv->owned);
        g4_strmap_free(&pv->tensor_index);
        g4_strmap_free(&pv->producer_index);
        g4_strmap_free(&pv->value_index);
        free(pv->cons_start);
        free(pv->cons_nodes);
        free(pv->bytes);
        free(pv);
    }
    for (int i = 0; i < m->n_nodes; i++) free(m->nodes[i].attrs);
    free(m->nodes);
    free(m->tensors);
    free(m->inputs);
    free(m->outputs);
    free(m->opset_domains);
    free(m->opset_versions);
    free(m->path);
    free(m->dir);
    free(m);
}

const g4_tensor *g4_onnx_tensor(const g4_onnx_model *m, const char *name) {
    int i = g4_strmap_get(&m->priv->tensor_index, name);
    return i < 0 ? NULL : &m->tensors[i];
}

const g4_node *g4_onnx_producer(const g4_onnx_model *m, const char *name) {
    int i = g4_strmap_get(&m->priv->producer_index, name);
    return i < 0 ? NULL : &m->nodes[i];
}

int g4_onnx_consumers(const g4_onnx_model *m, const char *name, const g4_node **out, int max) {
    int v = g4_strmap_get(&m->priv->value_index, name);
    if (v < 0) return 0;
    int s = m->priv->cons_start[v], e = m->priv->cons_start[v + 1];
    for (int j = s; j < e && j - s < max; j++) out[j - s] = &m->nodes[m->priv->cons_nodes[j]];
    return e - s;
}

const g4_value_info *g4_onnx_input(const g4_onnx_model *m, const char *name) {
    for (int i = 0; i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, name) == 0) return &m->inputs[i];
    return NULL;
}

const g4_attr *g4_node_attr(const g4_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t g4_node_attr_int(const g4_node *n, const char *name, int64_t def) {
    const g4_attr *a = g4_node_attr(n, name);
    return a && a->type == G4_ATTR_INT ? a->i : def;
}

float g4_node_attr_float(const g4_node *n, const char *name, float def) {
    const g4_attr *a = g4_node_attr(n, name);
    return a && a->type == G4_ATTR_FLOAT ? a->f : def;
}

double g4_tensor_get(const g4_tensor *t, uint64_t i) {
    G4_ASSERT(i < t->numel);
    const uint8_t *p = t->data + i * (uint64_t)(g4_dtype_bits(t->dtype) / 8);
    switch (t->dtype) {
    case G4_DT_FLOAT: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case G4_DT_DOUBLE: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case G4_DT_FLOAT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return g4_f16_to_f32(v);
    }
    case G4_DT_BFLOAT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return g4_bf16_to_f32(v);
    }
    case G4_DT_UINT8:
    case G4_DT_BOOL: return *p;
    case G4_DT_INT8: return (int8_t)*p;
    case G4_DT_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case G4_DT_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case G4_DT_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case G4_DT_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case G4_DT_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case G4_DT_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    default: G4_ASSERT(!"g4_tensor_get: unsupported dtype"); return 0;
    }
}

int g4_tensor_to_f32(const g4_tensor *t, float *dst) {
    if (t->dtype == G4_DT_FLOAT) {
        if (t->nbytes) memcpy(dst, t->data, (size_t)t->nbytes);
    } else if (t->dtype == G4_DT_FLOAT16) {
        for (uint64_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = g4_f16_to_f32(h);
        }
    } else if (t->dtype == G4_DT_BFLOAT16) {
        for (uint64_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = g4_bf16_to_f32(h);
        }
    } else {
        return g4_fail(G4_EUSER, "tensor '%s': dtype %s, expected float16, bfloat16 or float32",
                       t->name, g4_dtype_name(t->dtype));
    }
    return G4_OK;
}

// Non-finite elements, counted one by one (the slow path, for blocks that hold some).
static uint64_t nonfinite_scalar(const g4_tensor *t, uint64_t lo, uint64_t hi, uint64_t *first) {
    uint64_t n = 0;
    for (uint64_t i = lo; i < hi; i++) {
        int bad;
        if (t->dtype == G4_DT_FLOAT16 || t->dtype == G4_DT_BFLOAT16) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            const uint16_t m = t->dtype == G4_DT_FLOAT16 ? 0x7c00u : 0x7f80u;
            bad = (h & m) == m;
        } else if (t->dtype == G4_DT_FLOAT) {
            uint32_t w;
            memcpy(&w, t->data + 4 * i, 4);
            bad = (w & 0x7f800000u) == 0x7f800000u;
        } else {
            uint64_t w;
            memcpy(&w, t->data + 8 * i, 8);
            bad = (w & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
        }
        if (bad && n++ == 0 && first) *first = i;
    }
    return n;
}

uint64_t g4_tensor_nonfinite(const g4_tensor *t, uint64_t *first) {
    const int esz = t->dtype == G4_DT_FLOAT16 || t->dtype == G4_DT_BFLOAT16 ? 2
                    : t->dtype == G4_DT_FLOAT                               ? 4
                    : t->dtype == G4_DT_DOUBLE                              ? 8
                                                                            : 0;
    if (!esz || !t->data) return 0;
    // An element is non-finite when its exponent bits are all ones. Eight bytes at a time: y has
    // a zero lane exactly where an element's exponent is all ones, and (y - 1 per lane) & (top
    // bit per lane) is non-zero iff some lane of y is zero (y's top bits are clear). OR-ed over
    // a block, so that the loop is branch-free (the compiler vectorises it) and a block with a
    // hit is recounted element by element.
    uint64_t mask, one, top;
    if (esz == 2) {
        const uint64_t m = t->dtype == G4_DT_FLOAT16 ? 0x7c00u : 0x7f80u;
        mask = m * 0x0001000100010001ull, one = 0x0001000100010001ull, top = 0x8000800080008000ull;
    } else if (esz == 4) {
        mask = 0x7f8000007f800000ull, one = 0x0000000100000001ull, top = 0x8000000080000000ull;
    } else {
        mask = 0x7ff0000000000000ull, one = 1, top = 0x8000000000000000ull;
    }
    const uint64_t per_word = 8 / (uint64_t)esz, block_words = 4096;
    const uint64_t n_words = t->numel / per_word;
    uint64_t n = 0;
    for (uint64_t b = 0; b < n_words; b += block_words) {
        const uint64_t e = b + block_words < n_words ? b + block_words : n_words;
        uint64_t acc = 0;
        for (uint64_t k = b; k < e; k++) {
            uint64_t w;
            memcpy(&w, t->data + 8 * k, 8);
            const uint64_t y = (w & mask) ^ mask;
            acc |= (y - one) & top;
        }
        if (acc) n += nonfinite_scalar(t, b * per_word, e * per_word, n ? NULL : first);
    }
    n += nonfinite_scalar(t, n_words * per_word, t->numel, n ? NULL : first);
    return n;
}

int g4_tensor_check_finite(const g4_tensor *t, const char *file) {
    uint64_t first = 0;
    const uint64_t n = g4_tensor_nonfinite(t, &first);
    if (!n) return G4_OK;
    const double v = g4_tensor_get(t, first);
    return g4_fail(G4_EUSER,
                   "%s: tensor '%s' holds %llu NaN/Inf value%s (the first at element %llu: %s): "
                   "the package's weights are corrupt",
                   file, t->name, (unsigned long long)n, n == 1 ? "" : "s",
                   (unsigned long long)first,
                   isnan(v) ? "nan"
                   : v > 0  ? "inf"
                            : "-inf");
}
