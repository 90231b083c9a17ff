// test_q4_writer.c: `g4cu quantize` (quant/q4_writer.c) on the real exporter's tiny package:
// the graph rewrite Olive makes, the k-quant bytes against onnxruntime's (tests/fixtures/q4), the
// onnx_ir external-data layout, byte-exact round trip of everything left alone, --keep,
// atomic output (nothing half-written on failure), and an output that cannot damage its input
// (copies, never hard links; not inside the input package; a killed run's temporary directory
// removed by the next run).
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loader/package.h"
#include "onnx.pb-c.h"
#include "quant/ext_layout.h"
#include "quant/q4.h"
#include "quant/q4_writer.h"
#include "tests/test_util.h"

static const char *tiny, *fixtures;

static int files_equal(const char *a, const char *b) {
    return g4t_sh("cmp -s '%s' '%s'", a, b) == 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

// Entries of dir whose names start with prefix.
static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void test_layout_rule(void) {
    const uint64_t M = 1u << 20;
    const uint64_t sizes[] = {100, 300, 2 * M, 300, 256, 257, 5 * M + 3, 0, M};
    uint64_t off[9];
    uint64_t total = g4_ext_layout(sizes, 9, off);
    CHECK(off[0] == G4_EXT_INLINE && off[4] == G4_EXT_INLINE && off[7] == G4_EXT_INLINE); // <= 256
    CHECK(off[5] == 0);          // 257: the smallest external
    CHECK(off[1] == 257);        // 300, first in initializer order
    CHECK(off[3] == 557);        // 300, second
    CHECK(off[8] == 857);        // exactly 1 MiB: not aligned
    CHECK(off[2] == 17 * 65536); // 2 MiB: 857 + 1 MiB = 1049433 rounded up to 64 KiB
    CHECK(off[6] == 49 * 65536); // 17 * 64 KiB + 2 MiB = 49 * 64 KiB, already aligned
    CHECK(total == 49 * 65536 + 5 * M + 3);
}

// The full-size E2B decoder's inventory (../shared/spec/onnx-package-format.md 6.1, 6.2) through
// the layout rule must give the published data files' sizes: f16 4,733,337,600 bytes, Q4_K_M
// 1,511,784,448 (the spec's size check; this exercises the 64 KiB alignment of > 1 MiB tensors).
static void add_linear(uint64_t *t, int *n, int q4, int K, int N) {
    if (!q4) {
        t[(*n)++] = (uint64_t)K * N * 2;
        return;
    }
    const g4_q4_shape sh = g4_q4_shape_of(K, N, 32);
    t[(*n)++] = sh.q_bytes;
    t[(*n)++] = sh.n_scales * 2;
    t[(*n)++] = sh.zp_bytes;
}

static void test_e2b_sizes(void) {
    static uint64_t t[2048], off[2048];
    for (int q4 = 0; q4 < 2; q4++) {
        int n = 0;
        for (int i = 0; i < 35; i++) {
            const int hd = (i + 1) % 5 == 0 ? 512 : 256, I = i >= 15 ? 12288 : 6144;
            add_linear(t, &n, q4, 1536, 8 * hd); // q_proj
            if (i < 15) {                        // k_proj, v_proj, k_norm: KV-owning layers
                add_linear(t, &n, q4, 1536, hd);
                add_linear(t, &n, q4, 1536, hd);
                t[n++] = (uint64_t)hd * 2;
            }
            add_linear(t, &n, q4, 8 * hd, 1536);           // o_proj
            add_linear(t, &n, q4, 1536, I);                // gate_proj
            add_linear(t, &n, q4, 1536, I);                // up_proj
            add_linear(t, &n, q4, I, 1536);                // down_proj
            add_linear(t, &n, q4, 1536, 256);              // per_layer_input_gate
            add_linear(t, &n, q4, 256, 1536);              // per_layer_projection
            t[n++] = (uint64_t)hd * 2;                     // q_norm
            for (int k = 0; k < 5; k++) t[n++] = 1536 * 2; // the five layer norms
            t[n++] = 2;                                    // layer_scalar (inline)
        }
        t[n++] = 1536 * 2;                                        // model.norm
        add_linear(t, &n, q4, 1536, 262144);                      // lm_head
        for (int k = 0; k < 2; k++) t[n++] = 131072ull * 128 * 2; // local RoPE cos, sin
        for (int k = 0; k < 2; k++) t[n++] = 131072ull * 256 * 2; // global RoPE cos, sin
        const uint64_t size = g4_ext_layout(t, n, off);
        int n_inline = 0;
        for (int i = 0; i < n; i++) n_inline += off[i] == G4_EXT_INLINE;
        CHECK_MSG(size == (q4 ? 1511784448ull : 4733337600ull), "%s decoder data: %llu bytes",
                  q4 ? "Q4" : "f16", (unsigned long long)size);
        CHECK_INT(n_inline, 35);
        CHECK_INT(n - n_inline, q4 ? 506 + 276 * 2 : 506);
    }
}

// The tiny decoder's linears: [name in the file, K, N] via the f16 model.
typedef struct {
    const char *name;
    int K, N;
} lin;

static int f16_linears(const g4_onnx_model *m, lin *out, int max) {
    int n = 0;
    for (int i = 0; i < m->n_tensors && n < max; i++) {
        const g4_tensor *t = &m->tensors[i];
        if (t->ndim == 2 && ends_with(t->name, ".weight_t"))
            out[n++] = (lin){t->name, (int)t->dims[0], (int)t->dims[1]};
    }
    return n;
}

static void test_full_quantize(const char *tmp) {
    char *out = g4_sprintf("%s/q4", tmp);
    g4_q4_write_opts o = {.keep = NULL, .n_keep = 0, .block = G4_Q4_BLOCK, .n_threads = 2};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(tiny, out, &o, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) goto done;
    CHECK_INT(st.n_quantized, 83);
    CHECK_INT(st.n_weights, 83);
    CHECK_INT(st.n_kept, 0);
    g4_q4_write_stats_free(&st);
    CHECK_INT(count_entries(tmp, "q4.tmp-"), 0);

    g4_package *p16 = NULL, *p4 = NULL, *pr = NULL;
    char *ref_dir = g4t_tmpdir(); // onnxruntime's Q4 decoder in the tiny package
    g4t_q4_package(ref_dir, tiny, fixtures);
    rc = g4_package_open(tiny, &p16);
    if (!rc) rc = g4_package_open(out, &p4);
    if (!rc) rc = g4_package_open(ref_dir, &pr);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) goto close;
    CHECK(p4->text.weights_q4 == 1);
    const g4_component *c16 = g4_package_component(p16, G4_COMP_DECODER);
    const g4_component *c4 = g4_package_component(p4, G4_COMP_DECODER);
    const g4_component *cr = g4_package_component(pr, G4_COMP_DECODER);
    const g4_onnx_model *m16 = c16->model, *m4 = c4->model;

    // Every linear binds, and the k_quant ones are onnxruntime's bytes.
    lin L[128];
    int nl = f16_linears(m16, L, 128), same = 0, kq = 0;
    CHECK_INT(nl, 83);
    for (int i = 0; i < nl; i++) {
        g4_linear a, b;
        rc = g4_q4_linear_get(c4, L[i].name, L[i].K, L[i].N, &a);
        CHECK_MSG(rc == G4_OK, "%s: %s", L[i].name, g4_error());
        if (rc || g4_q4_kblocks(L[i].K, 32) % 2) continue; // odd block count: onnxruntime used RTN
        kq++;
        rc = g4_q4_linear_get(cr, L[i].name, L[i].K, L[i].N, &b);
        CHECK_MSG(rc == G4_OK, "%s: %s", L[i].name, g4_error());
        if (rc) continue;
        const g4_q4_shape sh = g4_q4_shape_of(L[i].K, L[i].N, 32);
        same += !memcmp(a.w, b.w, sh.q_bytes) && !memcmp(a.scales, b.scales, sh.n_scales * 2) &&
                !memcmp(a.zp, b.zp, sh.zp_bytes);
    }
    printf("  g4cu quantize: %d linears, %d of %d k_quant weights identical to onnxruntime's\n", nl,
           same, kq);
    CHECK_INT(kq, 73);
    CHECK_INT(same, kq);

    // The graph: MatMul -> MatMulNBits as Olive writes it; everything else as it was.
    CHECK_INT(m4->n_nodes, m16->n_nodes);
    int n_nbits = 0, bad_nodes = 0;
    for (int i = 0; i < m4->n_nodes && i < m16->n_nodes; i++) {
        const g4_node *a = &m16->nodes[i], *b = &m4->nodes[i];
        if (!strcmp(a->op_type, "MatMul")) {
            n_nbits++;
            char *nm = g4_sprintf("%s_Q4", a->name), *out0 = g4_sprintf("%s_Q4", a->outputs[0]);
            const char *w = a->inputs[1];
            char *qn = g4_sprintf("%s_Q4", w), *sn = g4_sprintf("%s_scales", w),
                 *zn = g4_sprintf("%s_zero_point", w);
            const int ok =
                !strcmp(b->op_type, "MatMulNBits") && !strcmp(b->domain, "com.microsoft") &&
                !strcmp(b->name, nm) && b->n_inputs == 4 && !strcmp(b->inputs[0], a->inputs[0]) &&
                !strcmp(b->inputs[1], qn) && !strcmp(b->inputs[2], sn) &&
                !strcmp(b->inputs[3], zn) && b->n_outputs == 1 && !strcmp(b->outputs[0], out0) &&
                b->n_attrs == 4 && !strcmp(b->attrs[0].name, "K") &&
                b->attrs[0].i == g4_onnx_tensor(m16, w)->dims[0] &&
                !strcmp(b->attrs[1].name, "N") &&
                b->attrs[1].i == g4_onnx_tensor(m16, w)->dims[1] &&
                !strcmp(b->attrs[2].name, "bits") && b->attrs[2].i == 4 &&
                !strcmp(b->attrs[3].name, "block_size") && b->attrs[3].i == 32 &&
                !g4_node_attr(b, "accuracy_level") && !g4_onnx_tensor(m4, w);
            if (!ok)
                fprintf(stderr, "  node %d (%s) is not the expected MatMulNBits\n", i, a->name);
            bad_nodes += !ok;
            // readers of the old output now read the renamed one
            const g4_node *rd[8];
            CHECK_INT(g4_onnx_consumers(m4, a->outputs[0], rd, 8), 0);
            CHECK(g4_onnx_consumers(m4, out0, rd, 8) ==
                  g4_onnx_consumers(m16, a->outputs[0], rd, 8));
            free(nm), free(out0), free(qn), free(sn), free(zn);
        } else {
            int ok = !strcmp(a->op_type, b->op_type) && !strcmp(a->name, b->name) &&
                     a->n_inputs == b->n_inputs && a->n_outputs == b->n_outputs &&
                     a->n_attrs == b->n_attrs;
            for (int k = 0; ok && k < a->n_outputs; k++) ok = !strcmp(a->outputs[k], b->outputs[k]);
            for (int k = 0; ok && k < a->n_inputs; k++) {
                const g4_node *prod = g4_onnx_producer(m16, a->inputs[k]);
                const int renamed = prod && !strcmp(prod->op_type, "MatMul");
                char *want = renamed ? g4_sprintf("%s_Q4", a->inputs[k]) : g4_strdup(a->inputs[k]);
                ok = !strcmp(b->inputs[k], want);
                free(want);
            }
            if (!ok) fprintf(stderr, "  node %d (%s) changed\n", i, a->name);
            bad_nodes += !ok;
        }
    }
    CHECK_INT(n_nbits, 83);
    CHECK_INT(bad_nodes, 0);
    CHECK_INT(m4->n_inputs, m16->n_inputs);
    CHECK_INT(m4->n_outputs, m16->n_outputs);
    for (int i = 0; i < m4->n_outputs && i < m16->n_outputs; i++)
        CHECK(!strcmp(m4->outputs[i].name, m16->outputs[i].name));

    // Layout: onnx_ir's rule over the initializers in file order; the non-linear tensors' bytes
    // unchanged.
    int n_init = 0, bad_place = 0, bad_bytes = 0;
    uint64_t sizes[2048], offs[2048];
    const g4_tensor *ts[2048];
    for (int i = 0; i < m4->n_tensors && n_init < 2048; i++)
        if (m4->tensors[i].kind == G4_TENSOR_INITIALIZER) {
            ts[n_init] = &m4->tensors[i];
            sizes[n_init++] = m4->tensors[i].nbytes;
        }
    const uint64_t total = g4_ext_layout(sizes, n_init, offs);
    for (int i = 0; i < n_init; i++) {
        const g4_tensor *t = ts[i];
        bad_place += offs[i] == G4_EXT_INLINE ? t->external
                                              : !t->external || t->offset != offs[i] ||
                                                    strcmp(t->location, "model.onnx.data");
        const g4_tensor *o16 = g4_onnx_tensor(m16, t->name);
        if (o16)
            bad_bytes +=
                o16->nbytes != t->nbytes || (t->nbytes && memcmp(o16->data, t->data, t->nbytes));
    }
    CHECK_INT(bad_place, 0);
    CHECK_INT(bad_bytes, 0);
    CHECK(m4->external_bytes <= total);
    char *data = g4_sprintf("%s/decoder/model.onnx.data", out);
    struct stat sb;
    CHECK(stat(data, &sb) == 0 && (uint64_t)sb.st_size == total);
    free(data);
    int n_init16 = 0;
    for (int i = 0; i < m16->n_tensors; i++)
        n_init16 += m16->tensors[i].kind == G4_TENSOR_INITIALIZER;
    CHECK_INT(n_init, n_init16 - 83 + 3 * 83); // each fp16 weight replaced by three tensors

    // The other components and JSON files: the same bytes.
    static const char *const same_files[] = {"genai_config.json",
                                             "image_processor.json",
                                             "audio_feature_extraction.json",
                                             "embedding/model.onnx",
                                             "embedding/model.onnx.data",
                                             "vision_encoder/model.onnx",
                                             "audio_encoder/model.onnx.data"};
    for (size_t i = 0; i < sizeof same_files / sizeof *same_files; i++) {
        char *a = g4_sprintf("%s/%s", tiny, same_files[i]),
             *b = g4_sprintf("%s/%s", out, same_files[i]);
        CHECK_MSG(files_equal(a, b), "%s differs from the source", same_files[i]);
        free(a), free(b);
    }
close:
    g4_package_close(p16);
    g4_package_close(p4);
    g4_package_close(pr);
    g4t_rmtree(ref_dir);
done:
    free(out);
}

// --keep '*': nothing quantized, and the decoder is rewritten byte for byte as the exporter wrote
// it (protobuf-c keeps the fields our .proto does not name; the layout rule is the exporter's).
static void test_keep_all_round_trip(const char *tmp) {
    char *out = g4_sprintf("%s/keepall", tmp);
    const char *keep[] = {"*"};
    g4_q4_write_opts o = {.keep = keep, .n_keep = 1, .block = G4_Q4_BLOCK, .n_threads = 1};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(tiny, out, &o, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) {
        CHECK_INT(st.n_quantized, 0);
        CHECK_INT(st.n_kept, 83);
        g4_q4_write_stats_free(&st);
        static const char *const f[] = {"decoder/model.onnx", "decoder/model.onnx.data"};
        for (int i = 0; i < 2; i++) {
            char *a = g4_sprintf("%s/%s", tiny, f[i]), *b = g4_sprintf("%s/%s", out, f[i]);
            CHECK_MSG(files_equal(a, b), "--keep '*': %s is not byte-identical to the source",
                      f[i]);
            free(a), free(b);
        }
    }
    free(out);
}

static void test_keep_pattern(const char *tmp) {
    char *out = g4_sprintf("%s/keepmlp", tmp);
    const char *keep[] = {"model.layers.*.mlp.*",
                          "decoder.lm_head.weight_t"}; // without / with the prefix
    g4_q4_write_opts o = {.keep = keep, .n_keep = 2, .block = G4_Q4_BLOCK, .n_threads = 2};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(tiny, out, &o, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) {
        CHECK_INT(st.n_kept, 31);
        CHECK_INT(st.n_quantized, 52);
        g4_q4_write_stats_free(&st);
        g4_package *p;
        rc = g4_package_open(out, &p);
        CHECK_MSG(rc == G4_OK, "%s", g4_error());
        if (rc == G4_OK) {
            const g4_component *c = g4_package_component(p, G4_COMP_DECODER);
            g4_linear li;
            CHECK(g4_linear_get(c, "model.layers.3.mlp.up_proj.weight_t", 64, 128, &li) == G4_OK &&
                  li.kind == G4_W_F16);
            CHECK(g4_linear_get(c, "lm_head.weight_t", 64, 1024, &li) == G4_OK &&
                  li.kind == G4_W_F16);
            CHECK(g4_linear_get(c, "model.layers.3.self_attn.q_proj.weight_t", 64, 64, &li) ==
                      G4_OK &&
                  li.kind == G4_W_Q4);
            CHECK(g4_q4_linear_get(c, "model.layers.3.mlp.up_proj.weight_t", 64, 128, &li) ==
                  G4_EUSER);
            g4_package_close(p);
        }
    }
    free(out);
}

static void test_atomic_failures(const char *tmp) {
    // The output exists: refused, and left alone.
    char *out = g4_sprintf("%s/exists", tmp);
    mkdir(out, 0755);
    g4_q4_write_opts o = {.keep = NULL, .n_keep = 0, .block = G4_Q4_BLOCK, .n_threads = 1};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(tiny, out, &o, &st);
    CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "already exists"), "%s", g4_error());
    CHECK_INT(count_entries(out, ""), 2); // . and ..
    free(out);

    // A failure half-way (a dangling link in the source package, met while copying): no output
    // and no temporary directory left behind.
    char *src = g4_sprintf("%s/badsrc", tmp);
    g4t_sh("mkdir -p '%s' && cp -r '%s'/. '%s'/ && ln -s /nonexistent/file '%s/zz_dangling'", src,
           tiny, src, src);
    out = g4_sprintf("%s/fromBad", tmp);
    rc = g4_q4_write_package(src, out, &o, &st);
    CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "zz_dangling"), "%s", g4_error());
    struct stat sb;
    CHECK(stat(out, &sb) != 0);
    CHECK_INT(count_entries(tmp, "fromBad"), 0);
    free(out);

    // Not a package: nothing created.
    out = g4_sprintf("%s/fromNothing", tmp);
    rc = g4_q4_write_package(tmp, out, &o, &st);
    CHECK(rc == G4_EUSER && strstr(g4_error(), "genai_config.json"));
    CHECK_INT(count_entries(tmp, "fromNothing"), 0);
    free(out);
    free(src);
}

static void test_command(const char *tmp) {
    const char *g4cu = g4t_env("G4CU");
    char *out = g4_sprintf("%s/cmd", tmp), *log = g4_sprintf("%s/cmd.log", tmp),
         *err = g4_sprintf("%s/cmd.err", tmp);
    int rc = g4t_sh("'%s' quantize '%s' '%s' --threads 2 >'%s' 2>'%s'", g4cu, tiny, out, log, err);
    CHECK_INT(rc, 0);
    CHECK(
        g4t_sh("grep -q '83 linears quantized to 4 bits (block 32, 83 weights), 0 kept fp16' '%s'",
               log) == 0);
    // stderr is not a terminal: plain progress lines (no bar redrawn with \r), the last one
    // with every weight done
    CHECK(g4t_sh("grep -q '^quantize: 83/83 (100%%)' '%s' && ! grep -q \"$(printf '\\r')\" '%s'",
                 err, err) == 0);
    rc = g4t_sh("'%s' quantize '%s' '%s' >/dev/null 2>'%s'", g4cu, tiny, out, err);
    CHECK_INT(rc, 1);
    CHECK(g4t_sh("[ $(wc -l <'%s') -eq 1 ] && grep -q 'already exists' '%s'", err, err) == 0);
    rc = g4t_sh("'%s' quantize '%s' >/dev/null 2>'%s'", g4cu, tiny, err);
    CHECK_INT(rc, 1);
    CHECK(g4t_sh("grep -q 'expected PKG_F16 OUT' '%s'", err) == 0);
    rc = g4t_sh("'%s' quantize '%s' '%s/x' --keep >/dev/null 2>'%s'", g4cu, tiny, tmp, err);
    CHECK_INT(rc, 1);
    rc = g4t_sh("'%s' quantize '%s' '%s/x' --threads 0 >/dev/null 2>'%s'", g4cu, tiny, tmp, err);
    CHECK_INT(rc, 1);
    free(out), free(log), free(err);
}

// The rewrite's corner cases on fixtures/q4/writer_case.onnx (see make_q4_fixture.py).
static void test_writer_corner_cases(const char *tmp) {
    char *path = g4_sprintf("%s/q4/writer_case.onnx", fixtures), *dir = g4_sprintf("%s/wc", tmp);
    mkdir(dir, 0755);
    g4_onnx_model *src = NULL, *m = NULL;
    int rc = g4_onnx_open(path, &src);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    g4_q4_write_opts o = {.keep = NULL, .n_keep = 0, .block = G4_Q4_BLOCK, .n_threads = 1};
    g4_q4_write_stats st = {0};
    if (rc == G4_OK) rc = g4_q4_write_model(src, dir, "model.onnx", &o, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    char *out = g4_sprintf("%s/model.onnx", dir);
    if (rc == G4_OK) rc = g4_onnx_open(out, &m);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) {
        CHECK_INT(st.n_quantized, 3);             // m1, m2, m3; not m4 (computed B) nor m5 (3-D B)
        CHECK_INT(st.n_weights, 2);               // w1 shared by m1 and m3
        CHECK(!g4_onnx_tensor(m, "w1.weight_t")); // only MatMuls read it: dropped
        CHECK(g4_onnx_tensor(m, "w2.weight_t") != NULL); // the Gather still reads it
        CHECK(g4_onnx_tensor(m, "w3.weight_3d") != NULL);
        const g4_node *n1 = g4_onnx_producer(m, "h1_Q4"), *n2 = g4_onnx_producer(m, "h2_Q4");
        const g4_node *n3 = g4_onnx_producer(m, "y"), *n4 = g4_onnx_producer(m, "z");
        CHECK(n1 && !strcmp(n1->name, "m1_Q4") && !strcmp(n1->inputs[1], "w1.weight_t_Q4"));
        CHECK(n2 && !strcmp(n2->name, "m2_Q4") && !strcmp(n2->inputs[0], "h1_Q4"));
        CHECK(n3 && !strcmp(n3->name, "m3_Q4") && !strcmp(n3->inputs[0], "h2_Q4") &&
              !strcmp(n3->inputs[1], "w1.weight_t_Q4") &&
              !strcmp(n3->inputs[3], "w1.weight_t_zero_point"));
        CHECK(n4 && !strcmp(n4->op_type, "MatMul") && !strcmp(n4->inputs[0], "h1_Q4"));
        const g4_node *t = g4_onnx_producer(m, "h1t");
        CHECK(t && !strcmp(t->inputs[0], "h1_Q4"));
        CHECK(!g4_onnx_producer(m, "h1") && !g4_onnx_producer(m, "h2"));
        g4_component c = {G4_COMP_DECODER, "decoder", "", m->path, m};
        g4_linear li;
        CHECK(g4_q4_linear_get(&c, "w1.weight_t", 64, 64, &li) == G4_OK); // two readers, alike
        // value_info follows the renames; model metadata survives (protobuf-c unknown fields)
        char *bytes;
        size_t size;
        if (g4_read_file(out, &bytes, &size) == G4_OK) {
            Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, (const uint8_t *)bytes);
            CHECK(mp && mp->graph && mp->graph->n_value_info == 2);
            if (mp && mp->graph && mp->graph->n_value_info == 2)
                CHECK(!strcmp(mp->graph->value_info[0]->name, "h1_Q4") &&
                      !strcmp(mp->graph->value_info[1]->name, "h2_Q4"));
            int meta = 0; // ModelProto.metadata_props = 14, not in our .proto
            for (unsigned u = 0; mp && u < mp->base.n_unknown_fields; u++)
                meta += mp->base.unknown_fields[u].tag == 14;
            CHECK_INT(meta, 1);
            int msft = 0;
            for (size_t i = 0; mp && i < mp->n_opset_import; i++)
                msft += mp->opset_import[i]->domain &&
                        !strcmp(mp->opset_import[i]->domain, "com.microsoft") &&
                        mp->opset_import[i]->version == 1;
            CHECK_INT(msft, 1);
            if (mp) onnx__model_proto__free_unpacked(mp, NULL);
            free(bytes);
        }
    }
    g4_q4_write_stats_free(&st);
    g4_onnx_close(m);
    g4_onnx_close(src);
    free(path), free(dir), free(out);
}

// A pid that no process has (a child that has exited and been reaped).
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

// Outputs never destroy anything: the unchanged files are copies (an in-place edit of the Q4
// package leaves the f16 one alone), OUT may not lie inside the input package (however it is
// named), and a killed run's OUT.tmp-<pid> is removed by the next run for that OUT.
static void test_output_safety(const char *tmp) {
    char *src = g4_sprintf("%s/src16", tmp), *out = g4_sprintf("%s/q4safe", tmp);
    g4t_sh("mkdir -p '%s' && cp -r '%s'/. '%s'/ && chmod -R u+w '%s'", src, tiny, src, src);
    g4_q4_write_opts o = {.block = G4_Q4_BLOCK, .n_threads = 2};
    g4_q4_write_stats st;
    int rc = g4_q4_write_package(src, out, &o, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) g4_q4_write_stats_free(&st);
    const char *copied[] = {"genai_config.json", "embedding/model.onnx.data",
                            "vision_encoder/model.onnx"};
    for (size_t i = 0; rc == G4_OK && i < sizeof copied / sizeof copied[0]; i++) {
        char *a = g4_sprintf("%s/%s", src, copied[i]), *b = g4_sprintf("%s/%s", out, copied[i]);
        struct stat sa, sb;
        CHECK(stat(a, &sa) == 0 && stat(b, &sb) == 0);
        CHECK_MSG(sa.st_ino != sb.st_ino && sb.st_nlink == 1, "%s: a hard link of the source",
                  copied[i]);
        CHECK(files_equal(a, b));
        free(a), free(b);
    }
    // An in-place edit (what json.dump(open(F, 'w')), an editor or a patch does).
    char *cfg = g4_sprintf("%s/genai_config.json", out),
         *cfg16 = g4_sprintf("%s/genai_config.json", src);
    char *before = g4_sprintf("%s/before.json", tmp);
    g4t_sh("cp '%s' '%s'", cfg16, before);
    int fd = open(cfg, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, "{}\n", 3) == 3);
    if (fd >= 0) close(fd);
    CHECK_MSG(files_equal(cfg16, before), "editing the Q4 package's genai_config.json changed %s",
              cfg16);
    free(cfg), free(cfg16), free(before);

    // OUT inside the input package: refused, by the directory's identity (a symlink too).
    char *inside = g4_sprintf("%s/decoder/q4", src), *link = g4_sprintf("%s/srclink", tmp);
    rc = g4_q4_write_package(src, inside, &o, &st);
    CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "inside the input package"), "%s", g4_error());
    g4t_sh("ln -s '%s/decoder' '%s'", src, link);
    char *via_link = g4_sprintf("%s/q4", link);
    rc = g4_q4_write_package(src, via_link, &o, &st);
    CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "inside the input package"), "%s", g4_error());
    CHECK(count_entries(link, "q4") == 0);
    free(inside), free(link), free(via_link);

    // A killed run's temporary directory (its process gone) is removed and said so; a live
    // process's (pid 1) is left alone.
    char *out2 = g4_sprintf("%s/q4again", tmp);
    char *stale = g4_sprintf("%s.tmp-%ld", out2, dead_pid()), *live = g4_sprintf("%s.tmp-1", out2);
    g4t_sh("mkdir -p '%s/decoder' '%s' && head -c 100000 /dev/zero >'%s/decoder/model.onnx.data'",
           stale, live, stale);
    FILE *log = tmpfile();
    g4_q4_write_opts ol = {.block = G4_Q4_BLOCK, .n_threads = 2, .log = log};
    rc = g4_q4_write_package(src, out2, &ol, &st);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc == G4_OK) g4_q4_write_stats_free(&st);
    struct stat sb;
    CHECK_MSG(stat(stale, &sb) != 0, "%s (left by a killed run) is still there", stale);
    CHECK(stat(live, &sb) == 0 && S_ISDIR(sb.st_mode));
    char line[512] = "";
    rewind(log);
    CHECK(fgets(line, sizeof line, log) && strstr(line, "left by an interrupted run") &&
          strstr(line, stale));
    fclose(log);
    free(out2), free(stale), free(live);
    free(src), free(out);
}

int main(void) {
    tiny = g4t_env("G4_TINY_PKG");
    fixtures = g4t_env("G4_FIXTURES");
    char *tmp = g4t_tmpdir();
    test_layout_rule();
    test_e2b_sizes();
    test_full_quantize(tmp);
    test_writer_corner_cases(tmp);
    test_keep_all_round_trip(tmp);
    test_keep_pattern(tmp);
    test_atomic_failures(tmp);
    test_output_safety(tmp);
    test_command(tmp);
    g4t_rmtree(tmp);
    return g4t_finish("test_q4_writer");
}
