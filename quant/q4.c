// q4.c: MatMulNBits Q4 layout helpers, binding from a package, scalar dequantization (see q4.h).
#include "quant/q4.h"

#include <stdio.h>
#include <stdlib.h>

g4_q4_shape g4_q4_shape_of(int K, int N, int block) {
    g4_q4_shape s;
    s.kb = g4_q4_kblocks(K, block);
    s.q_bytes = (uint64_t)N * (uint64_t)s.kb * (uint64_t)(block / 2);
    s.n_scales = (uint64_t)N * (uint64_t)s.kb;
    s.zp_bytes = (uint64_t)N * (uint64_t)g4_q4_zp_row_bytes(s.kb);
    return s;
}

void g4_q4_pack_block(const uint8_t *codes, int block, uint8_t *blob) {
    for (int j = 0; j < block / 2; j++)
        blob[j] = (uint8_t)((codes[2 * j] & 15) | (codes[2 * j + 1] & 15) << 4);
}

void g4_q4_unpack_block(const uint8_t *blob, int block, uint8_t *codes) {
    for (int i = 0; i < block; i++) codes[i] = (uint8_t)g4_q4_nibble(blob, (uint64_t)i);
}

void g4_q4_pack_zp_row(const uint8_t *zp, int kb, uint8_t *row) {
    for (int j = 0; j < g4_q4_zp_row_bytes(kb); j++) {
        const int hi = 2 * j + 1 < kb ? zp[2 * j + 1] & 15 : 8; // padding nibble: the default zp
        row[j] = (uint8_t)((zp[2 * j] & 15) | hi << 4);
    }
}

void g4_q4_unpack_zp_row(const uint8_t *row, int kb, uint8_t *zp) {
    for (int b = 0; b < kb; b++) zp[b] = (uint8_t)g4_q4_nibble(row, (uint64_t)b);
}

// --- binding ------------------------------------------------------------------------------------

static const char *node_input(const g4_node *nd, int i) {
    return i < nd->n_inputs ? nd->inputs[i] : "";
}

static int shape_is(const g4_tensor *t, int ndim, const int64_t *dims) {
    if (t->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (t->dims[d] != dims[d]) return 0;
    return 1;
}

static int is_pow2(int64_t v) {
    return v > 0 && (v & (v - 1)) == 0;
}

// Value `name` read by node nd must be an initializer (or Constant) of the component.
static int node_tensor(const g4_component *c, const g4_node *nd, int i, const char *role,
                       const g4_tensor **out) {
    const char *name = node_input(nd, i);
    *out = g4_onnx_tensor(c->model, name);
    if (!*out)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': %s (input %d) '%s' is not an initializer",
                       c->onnx_path, nd->name, role, i, name);
    return G4_OK;
}

// The Q4 tensor of weight_name: Olive's "<name>_Q4", else onnxruntime's "<name>_Q4G32".
static const g4_tensor *find_q4_tensor(const g4_component *c, const char *weight_name) {
    static const char *const suffix[] = {"_Q4", "_Q4G32"};
    for (int i = 0; i < 2; i++) {
        char *n = g4_sprintf("%s%s", weight_name, suffix[i]);
        const g4_tensor *t = g4_component_find(c, n);
        free(n);
        if (t) return t;
    }
    return NULL;
}

// Attribute `name` of MatMulNBits node nd as an INT; def when absent and not required.
static int int_attr(const g4_component *c, const g4_node *nd, const char *name, int required,
                    int64_t def, int64_t *out) {
    const g4_attr *a = g4_node_attr(nd, name);
    if (!a) {
        if (required)
            return g4_fail(G4_EUSER,
                           "%s: MatMulNBits node '%s': required attribute '%s' is missing",
                           c->onnx_path, nd->name, name);
        *out = def;
        return G4_OK;
    }
    if (a->type != G4_ATTR_INT)
        return g4_fail(G4_EUSER, "%s: MatMulNBits node '%s': attribute '%s' must be an INT",
                       c->onnx_path, nd->name, name);
    *out = a->i;
    return G4_OK;
}

// Checks one MatMulNBits node and fills out from it.
static int bind_node(const g4_component *c, const g4_node *nd, const g4_tensor *b, int K, int N,
                     g4_linear *out) {
    const char *f = c->onnx_path;
    int64_t k = 0, n = 0, bits = 0, block = 0, prepacked = 0;
    int rc;
    if ((rc = int_attr(c, nd, "K", 1, 0, &k)) || (rc = int_attr(c, nd, "N", 1, 0, &n)) ||
        (rc = int_attr(c, nd, "bits", 0, 4, &bits)) ||
        (rc = int_attr(c, nd, "block_size", 1, 0, &block)) ||
        (rc = int_attr(c, nd, "weight_prepacked", 0, 0, &prepacked)))
        return rc;
    if (k <= 0 || n <= 0 || k > INT32_MAX || n > INT32_MAX)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': K = %lld, N = %lld, expected positive "
                       "int32 values",
                       f, nd->name, (long long)k, (long long)n);
    if ((K > 0 && k != K) || (N > 0 && n != N))
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s' (weight '%s'): K = %lld, N = %lld, "
                       "expected K = %d, N = %d",
                       f, nd->name, b->name, (long long)k, (long long)n, K, N);
    if (bits != 4)
        return g4_fail(G4_EUSER, "%s: MatMulNBits node '%s': bits = %lld, g4cu supports 4", f,
                       nd->name, (long long)bits);
    if (!is_pow2(block) || block < 16)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': block_size = %lld, expected a power "
                       "of two >= 16",
                       f, nd->name, (long long)block);
    if (block != G4_Q4_BLOCK)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': block_size = %lld, g4cu kernels "
                       "support %d",
                       f, nd->name, (long long)block, G4_Q4_BLOCK);
    if (prepacked != 0)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': weight_prepacked = %lld, expected 0 "
                       "(the plain layout)",
                       f, nd->name, (long long)prepacked);
    if (strcmp(node_input(nd, 1), b->name) != 0)
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s' reads '%s' as input %s, expected it "
                       "as B (input 1)",
                       f, nd->name, b->name, strcmp(node_input(nd, 0), b->name) == 0 ? "0" : "2+");
    if (node_input(nd, 4)[0])
        return g4_fail(G4_EUSER,
                       "%s: MatMulNBits node '%s': g_idx input '%s' is not supported "
                       "(expected none)",
                       f, nd->name, node_input(nd, 4));

    const g4_q4_shape sh = g4_q4_shape_of((int)k, (int)n, (int)block);
    const int zrow = g4_q4_zp_row_bytes(sh.kb);
    char found[160];
    if (b->dtype != G4_DT_UINT8 || !shape_is(b, 3, (int64_t[]){n, sh.kb, block / 2}))
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': expected uint8 [N, ceil(K/%lld), %lld] = "
                       "[%lld, %d, %lld], found %s %s",
                       f, b->name, (long long)block, (long long)block / 2, (long long)n, sh.kb,
                       (long long)block / 2, g4_dtype_name(b->dtype),
                       g4_tensor_shape_str(b, found, sizeof found));

    const g4_tensor *s, *z = NULL, *bias = NULL;
    if ((rc = node_tensor(c, nd, 2, "scales", &s))) return rc;
    if (s->dtype != G4_DT_FLOAT16 ||
        !(shape_is(s, 1, (int64_t[]){n * sh.kb}) || shape_is(s, 2, (int64_t[]){n, sh.kb})))
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s': expected float16 [N*kb] = [%lld] (or [N, kb] = "
                       "[%lld, %d]), found %s %s",
                       f, s->name, (long long)(n * sh.kb), (long long)n, sh.kb,
                       g4_dtype_name(s->dtype), g4_tensor_shape_str(s, found, sizeof found));
    if (node_input(nd, 3)[0]) {
        if ((rc = node_tensor(c, nd, 3, "zero_points", &z))) return rc;
        if (z->dtype != G4_DT_UINT8)
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': zero points of dtype %s, expected packed "
                           "uint8 (unpacked float zero points are not supported)",
                           f, z->name, g4_dtype_name(z->dtype));
        if (!(shape_is(z, 1, (int64_t[]){n * zrow}) || shape_is(z, 2, (int64_t[]){n, zrow})))
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': expected uint8 [N*ceil(kb/2)] = [%lld] (or "
                           "[N, ceil(kb/2)] = [%lld, %d]), found %s",
                           f, z->name, (long long)(n * zrow), (long long)n, zrow,
                           g4_tensor_shape_str(z, found, sizeof found));
    }
    if (node_input(nd, 5)[0]) {
        if ((rc = node_tensor(c, nd, 5, "bias", &bias))) return rc;
        if (bias->dtype != G4_DT_FLOAT16 || !shape_is(bias, 1, (int64_t[]){n}))
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s': bias expected float16 [N] = [%lld], found "
                           "%s %s",
                           f, bias->name, (long long)n, g4_dtype_name(bias->dtype),
                           g4_tensor_shape_str(bias, found, sizeof found));
    }
    if (nd->n_inputs > 6)
        return g4_fail(G4_EUSER, "%s: MatMulNBits node '%s' has %d inputs, expected at most 6", f,
                       nd->name, nd->n_inputs);
    // The 4-bit codes cannot be NaN; the fp16 scales and bias can (as g4_component_get checks).
    if ((rc = g4_tensor_check_finite(s, f)) || (bias && (rc = g4_tensor_check_finite(bias, f))))
        return rc;
    memset(out, 0, sizeof *out);
    out->kind = G4_W_Q4;
    out->in = (int)k;
    out->out = (int)n;
    out->block = (int)block;
    out->w = b->data;
    out->scales = s->data;
    out->zp = z ? z->data : NULL;
    out->bias = bias ? bias->data : NULL;
    return G4_OK;
}

int g4_q4_linear_get(const g4_component *c, const char *weight_name, int K, int N, g4_linear *out) {
    memset(out, 0, sizeof *out);
    if (!c || !c->model) return g4_fail(G4_EUSER, "Q4 weight '%s': no such component", weight_name);
    const g4_tensor *b = find_q4_tensor(c, weight_name);
    if (!b)
        return g4_fail(G4_EUSER,
                       "%s: tensor '%s%s_Q4' is missing (expected the MatMulNBits "
                       "weight of linear '%s')",
                       c->onnx_path, c->prefix, weight_name, weight_name);
    const g4_node *cons[8];
    int n_cons = g4_onnx_consumers(c->model, b->name, cons, 8);
    if (n_cons == 0)
        return g4_fail(G4_EUSER, "%s: tensor '%s' is read by no node (expected a MatMulNBits node)",
                       c->onnx_path, b->name);
    if (n_cons > 8)
        return g4_fail(G4_EUSER, "%s: tensor '%s' is read by %d nodes, at most 8 supported",
                       c->onnx_path, b->name, n_cons);
    // An identical weight stored once may feed several nodes: all must describe it alike.
    for (int i = 0; i < n_cons; i++) {
        const g4_node *nd = cons[i];
        if (strcmp(nd->op_type, "MatMulNBits") || strcmp(nd->domain, "com.microsoft"))
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s' is read by node '%s' (%s%s%s), expected only "
                           "com.microsoft MatMulNBits nodes",
                           c->onnx_path, b->name, nd->name, nd->domain, nd->domain[0] ? "." : "",
                           nd->op_type);
        g4_linear li;
        int rc = bind_node(c, nd, b, K, N, &li);
        if (rc) return rc;
        if (i == 0) {
            *out = li;
        } else if (memcmp(&li, out, sizeof li) != 0) {
            memset(out, 0, sizeof *out);
            return g4_fail(G4_EUSER,
                           "%s: tensor '%s' is read by MatMulNBits nodes '%s' and '%s' "
                           "with different attributes or tensors",
                           c->onnx_path, b->name, cons[0]->name, nd->name);
        }
    }
    return G4_OK;
}

int g4_linear_get(const g4_component *c, const char *weight_name, int K, int N, g4_linear *out) {
    memset(out, 0, sizeof *out);
    const g4_tensor *t = c && c->model ? g4_component_find(c, weight_name) : NULL;
    if (!t) return g4_q4_linear_get(c, weight_name, K, N, out);
    char found[160];
    if (t->dtype != G4_DT_FLOAT16 || t->ndim != 2 || (K > 0 && t->dims[0] != K) ||
        (N > 0 && t->dims[1] != N) || t->dims[0] <= 0 || t->dims[1] <= 0 ||
        t->dims[0] > INT32_MAX || t->dims[1] > INT32_MAX)
        return g4_fail(G4_EUSER, "%s: tensor '%s': expected float16 [K, N] = [%d, %d], found %s %s",
                       c->onnx_path, t->name, K, N, g4_dtype_name(t->dtype),
                       g4_tensor_shape_str(t, found, sizeof found));
    int rc = g4_tensor_check_finite(t, c->onnx_path); // as g4_component_get does
    if (rc) return rc;
    out->kind = G4_W_F16;
    out->in = (int)t->dims[0];
    out->out = (int)t->dims[1];
    out->w = t->data;
    return G4_OK;
}

// --- dequantization -----------------------------------------------------------------------------

// Scale of block b of column n (data pointers may be unaligned: read through memcpy).
static float q4_scale(const g4_linear *w, int kb, int n, int b) {
    uint16_t h;
    memcpy(&h, (const uint8_t *)w->scales + 2 * ((size_t)n * kb + b), 2);
    return g4_f16_to_f32(h);
}

static int q4_zp(const g4_linear *w, int kb, int n, int b) {
    if (!w->zp) return 8; // MatMulNBits' default zero point for 4 bits: 2^(bits-1)
    const uint8_t *row = (const uint8_t *)w->zp + (size_t)n * g4_q4_zp_row_bytes(kb);
    return g4_q4_nibble(row, (uint64_t)b);
}

void g4_q4_dequant_col(const g4_linear *w, int n, float *col) {
    G4_ASSERT(w->kind == G4_W_Q4 && w->block >= 2 && n >= 0 && n < w->out);
    const int K = w->in, B = w->block, kb = g4_q4_kblocks(K, B);
    const uint8_t *q = w->w;
    for (int b = 0; b < kb; b++) {
        const uint8_t *blob = q + ((size_t)n * kb + b) * (size_t)(B / 2);
        const float s = q4_scale(w, kb, n, b);
        const int z = q4_zp(w, kb, n, b);
        for (int i = 0; i < B && b * B + i < K; i++)
            col[b * B + i] = (float)(g4_q4_nibble(blob, (uint64_t)i) - z) * s;
    }
}

void g4_q4_dequant_row(const g4_linear *w, int k, float *row) {
    G4_ASSERT(w->kind == G4_W_Q4 && w->block >= 2 && k >= 0 && k < w->in);
    const int B = w->block, kb = g4_q4_kblocks(w->in, B), b = k / B, i = k % B;
    const uint8_t *q = w->w;
    for (int n = 0; n < w->out; n++) {
        const uint8_t *blob = q + ((size_t)n * kb + b) * (size_t)(B / 2);
        row[n] =
            (float)(g4_q4_nibble(blob, (uint64_t)i) - q4_zp(w, kb, n, b)) * q4_scale(w, kb, n, b);
    }
}

void g4_q4_dequant(const g4_linear *w, float *dst) {
    G4_ASSERT(w->kind == G4_W_Q4);
    float *col = g4_malloc(sizeof(float) * (size_t)w->in);
    for (int n = 0; n < w->out; n++) {
        g4_q4_dequant_col(w, n, col);
        for (int k = 0; k < w->in; k++) dst[(size_t)k * w->out + n] = col[k];
    }
    free(col);
}
