// test_loader.c: the package loader on the real exporter's tiny package, checked against
// independent sources (the fixture's INITIALIZERS.txt, written by python onnx, and the HF
// config.json the package was exported from), then every bad input the loader must reject with
// a one-line error naming the file, the tensor and what was expected.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "loader/json.h"
#include "loader/package.h"
#include "onnx.pb-c.h"
#include "tests/test_util.h"

static const char *pkg_dir;

// --- the fixture against INITIALIZERS.txt ------------------------------------------------------

static void test_tensor_table_matches_onnx_listing(const g4_package *p) {
    char *path = g4_sprintf("%s/../INITIALIZERS.txt", pkg_dir);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    free(path);
    if (!f) return;
    char line[4096];
    const g4_component *comp = NULL;
    int listed[G4_COMP_COUNT] = {0}, matched = 0, mismatched = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "## ", 3)) {
            comp = NULL;
            for (int i = 0; i < G4_COMP_COUNT; i++)
                if (!strncmp(line + 3, p->comp[i].name, strlen(p->comp[i].name)) &&
                    line[3 + strlen(p->comp[i].name)] == ' ')
                    comp = g4_package_component(p, (g4_component_id)i);
            continue;
        }
        if (!comp || !strchr(line, '\t')) continue;
        char name[512], dims[512], where[128];
        int dtype;
        if (sscanf(line, "%511[^\t]\t%d\t%511[^\t]\t%127[^\n]", name, &dtype, dims, where) != 4)
            continue;
        listed[comp->id]++;
        const g4_tensor *t = g4_onnx_tensor(comp->model, name);
        if (!t) {
            mismatched++;
            fprintf(stderr, "  missing %s\n", name);
            continue;
        }
        char shp[256];
        g4_tensor_shape_str(t, shp, sizeof shp);
        int ok = t->dtype == dtype && strcmp(shp, dims) == 0;
        unsigned long long off, len;
        if (!strncmp(where, "EXT ", 4) && sscanf(where + 4, "%llu+%llu", &off, &len) == 2)
            ok = ok && t->external && t->offset == off && t->nbytes == len;
        else
            ok = ok && !t->external && !strcmp(where, "inline");
        if (ok) matched++;
        else {
            mismatched++;
            fprintf(stderr, "  differs: %s: ours %s %s ext=%d off=%llu len=%llu, listed %d %s %s\n",
                    name, g4_dtype_name(t->dtype), shp, t->external,
                    (unsigned long long)t->offset, (unsigned long long)t->nbytes, dtype, dims,
                    where);
        }
    }
    fclose(f);
    CHECK_INT(mismatched, 0);
    CHECK(matched > 400); // 442 initializers in the four components
    for (int i = 0; i < G4_COMP_COUNT; i++) {
        int ours = 0;
        const g4_onnx_model *m = p->comp[i].model;
        for (int k = 0; k < m->n_tensors; k++) ours += m->tensors[k].kind == G4_TENSOR_INITIALIZER;
        CHECK_MSG(ours == listed[i], "%s: %d initializers, listing has %d", p->comp[i].name, ours,
                  listed[i]);
    }
}

// --- the derived config against HF's config.json -----------------------------------------------

static int hf_int(const cJSON *o, const char *path) {
    const cJSON *v = g4_json_at(o, path);
    return cJSON_IsNumber(v) ? v->valueint : -12345;
}

static double hf_num(const cJSON *o, const char *path) {
    const cJSON *v = g4_json_at(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_config_matches_hf(const g4_package *p) {
    char *path = g4_sprintf("%s/../hf/config.json", pkg_dir);
    g4_json j;
    int rc = g4_json_open(path, &j);
    free(path);
    CHECK_MSG(rc == G4_OK, "%s", g4_error());
    if (rc) return;
    const cJSON *tc = g4_json_at(j.root, "text_config");
    const g4_text_config *c = &p->text;
    CHECK_INT(c->hidden, hf_int(tc, "hidden_size"));
    CHECK_INT(c->n_layers, hf_int(tc, "num_hidden_layers"));
    CHECK_INT(c->n_heads, hf_int(tc, "num_attention_heads"));
    CHECK_INT(c->n_kv_heads, hf_int(tc, "num_key_value_heads"));
    CHECK_INT(c->vocab, hf_int(tc, "vocab_size"));
    CHECK_INT(c->vocab_ple, hf_int(tc, "vocab_size_per_layer_input"));
    CHECK_INT(c->ple_dim, hf_int(tc, "hidden_size_per_layer_input"));
    CHECK_INT(c->n_kv_shared, hf_int(tc, "num_kv_shared_layers"));
    CHECK_INT(c->n_kv_layers, c->n_layers - hf_int(tc, "num_kv_shared_layers"));
    CHECK(fabs(c->final_softcap - hf_num(tc, "final_logit_softcapping")) < 1e-6);
    CHECK(fabs(c->rms_eps - hf_num(tc, "rms_norm_eps")) < 1e-12);
    CHECK(c->attn_scale == 1.0f);
    // HF casts sqrt(hidden) to the weight dtype (fp16 in the package).
    CHECK(c->embed_scale == g4_round_f16(sqrtf((float)c->hidden)));
    CHECK(c->ple_token_scale == g4_round_f16(sqrtf((float)c->ple_dim)));
    CHECK(c->ple_proj_scale == g4_round_f16(1.0f / sqrtf((float)c->hidden)));
    CHECK(c->ple_combine_scale == g4_round_f16(1.0f / sqrtf(2.0f)));
    CHECK_INT(c->bos_id, hf_int(tc, "bos_token_id"));
    CHECK_INT(c->pad_id, hf_int(tc, "pad_token_id"));
    CHECK_INT(c->image_token_id, hf_int(j.root, "image_token_id"));
    CHECK_INT(c->audio_token_id, hf_int(j.root, "audio_token_id"));
    // the placeholder test: each id is its kind, other ids (BOS, -1) are none; a model without
    // an audio placeholder (-1) matches no id, -1 included
    CHECK_INT(g4_placeholder_of(c, hf_int(j.root, "image_token_id")), G4_PH_IMAGE);
    CHECK_INT(g4_placeholder_of(c, hf_int(j.root, "audio_token_id")), G4_PH_AUDIO);
    CHECK_INT(g4_placeholder_of(c, c->bos_id), G4_PH_NONE);
    {
        g4_text_config no_audio = *c;
        no_audio.audio_token_id = -1;
        CHECK_INT(g4_placeholder_of(&no_audio, -1), G4_PH_NONE);
        CHECK_INT(g4_placeholder_of(&no_audio, c->audio_token_id), G4_PH_NONE);
    }
    CHECK(!c->weights_q4);

    const cJSON *types = g4_json_at(tc, "layer_types");
    int first_shared = c->n_layers - hf_int(tc, "num_kv_shared_layers");
    int ffn = hf_int(tc, "intermediate_size");
    int double_wide = cJSON_IsTrue(g4_json_at(tc, "use_double_wide_mlp"));
    for (int l = 0; l < c->n_layers; l++) {
        const g4_layer_config *L = &c->layer[l];
        const cJSON *t = cJSON_GetArrayItem(types, l);
        int full = cJSON_IsString(t) && !strcmp(t->valuestring, "full_attention");
        CHECK_MSG(L->type == (full ? G4_ATTN_FULL : G4_ATTN_SLIDING), "layer %d type", l);
        char key[64];
        snprintf(key, sizeof key, "per_layer_config.%d.head_dim", l);
        int hd = hf_int(tc, key);
        if (hd == -12345) hd = hf_int(tc, "head_dim");
        CHECK_MSG(L->head_dim == hd, "layer %d head_dim %d vs %d", l, L->head_dim, hd);
        CHECK_INT(L->window, full ? 0 : hf_int(tc, "sliding_window"));
        CHECK_INT(L->ffn, (l >= first_shared && double_wide) ? 2 * ffn : ffn);
        // KV sharing: the last non-shared layer of the same type.
        int src = l;
        if (l >= first_shared)
            for (int k = first_shared - 1; k >= 0; k--)
                if (c->layer[k].type == L->type) {
                    src = k;
                    break;
                }
        CHECK_MSG(L->kv_source == src, "layer %d kv source %d, expected %d", l, L->kv_source, src);
        // RoPE: default theta over the whole head on sliding layers; proportional on full
        // layers: theta over the full head_dim with partial_rotary_factor x head_dim / 2 pairs.
        const g4_rope_freqs *r = &c->rope[L->rope];
        const char *rk = full ? "rope_parameters.full_attention" : "rope_parameters.sliding_attention";
        char tk[96], pk[96];
        snprintf(tk, sizeof tk, "%s.rope_theta", rk);
        snprintf(pk, sizeof pk, "%s.partial_rotary_factor", rk);
        double theta = hf_num(tc, tk), partial = hf_num(tc, pk);
        if (isnan(partial)) partial = 1.0;
        CHECK_MSG(r->n_rotating == (int)(partial * hd / 2), "layer %d rotating pairs %d", l,
                  r->n_rotating);
        for (int i = 0; i < r->n_freq; i++) {
            double want = i < r->n_rotating ? pow(theta, -2.0 * i / hd) : 0.0;
            CHECK_MSG(fabs(r->inv_freq[i] - want) <= 1e-6 * want + 1e-12,
                      "layer %d inv_freq[%d] %.9g vs %.9g", l, i, r->inv_freq[i], want);
        }
        // the roundest base that reproduces the table: HF's own, exactly (tiny2's 128-row table
        // alone fits 20000.3 for 20000; alt-tiny's 3 rotating pairs 1.00002e6 for 1e6)
        CHECK_MSG(r->theta == theta, "layer %d theta %.9g vs %.9g", l, r->theta, theta);
    }

    const cJSON *vc = g4_json_at(j.root, "vision_config");
    CHECK_INT(p->vision.hidden, hf_int(vc, "hidden_size"));
    CHECK_INT(p->vision.n_layers, hf_int(vc, "num_hidden_layers"));
    CHECK_INT(p->vision.n_heads, hf_int(vc, "num_attention_heads"));
    CHECK_INT(p->vision.head_dim, hf_int(vc, "head_dim"));
    CHECK_INT(p->vision.ffn, hf_int(vc, "intermediate_size"));
    CHECK_INT(p->vision.pos_size, hf_int(vc, "position_embedding_size"));
    CHECK_INT(p->vision.patch_dim, 3 * hf_int(vc, "patch_size") * hf_int(vc, "patch_size"));
    CHECK_INT(p->vision.clipped, cJSON_IsTrue(g4_json_at(vc, "use_clipped_linears")));
    CHECK_INT(p->image_proc.patch_size, hf_int(vc, "patch_size"));
    CHECK_INT(p->image_proc.pooling_kernel_size, hf_int(vc, "pooling_kernel_size"));

    const cJSON *ac = g4_json_at(j.root, "audio_config");
    CHECK_INT(p->audio.hidden, hf_int(ac, "hidden_size"));
    CHECK_INT(p->audio.n_layers, hf_int(ac, "num_hidden_layers"));
    CHECK_INT(p->audio.n_heads, hf_int(ac, "num_attention_heads"));
    CHECK_INT(p->audio.conv_kernel, hf_int(ac, "conv_kernel_size"));
    CHECK_INT(p->audio.conv0_ch, cJSON_GetArrayItem(g4_json_at(ac, "subsampling_conv_channels"), 0)->valueint);
    CHECK_INT(p->audio.conv1_ch, cJSON_GetArrayItem(g4_json_at(ac, "subsampling_conv_channels"), 1)->valueint);
    CHECK_INT(p->audio.out_hidden, hf_int(ac, "output_proj_dims"));
    CHECK_INT(p->audio.n_rel_pos, hf_int(ac, "attention_context_left"));
    CHECK_INT(p->audio.out_dim, c->hidden);
    g4_json_close(&j);
}

static void test_lookup(const g4_package *p) {
    const g4_component *dec = g4_package_component(p, G4_COMP_DECODER);
    const g4_component *aud = g4_package_component(p, G4_COMP_AUDIO);
    // With and without the component prefix.
    const g4_tensor *a = g4_component_find(dec, "model.layers.0.self_attn.q_proj.weight_t");
    CHECK(a && !strcmp(a->name, "decoder.model.layers.0.self_attn.q_proj.weight_t"));
    CHECK(g4_component_find(dec, "decoder.model.layers.0.self_attn.q_proj.weight_t") == a);
    // Layer 1's pos_embed is stored once (as layer 0's): found through layer 1's consuming node.
    CHECK(g4_onnx_tensor(aud->model, "audio_encoder.encoder.layers.1.self_attn.pos_embed") == NULL);
    const g4_tensor *pe = g4_component_find(aud, "encoder.layers.1.self_attn.pos_embed");
    CHECK(pe && !strcmp(pe->name, "audio_encoder.encoder.layers.0.self_attn.pos_embed"));
    CHECK(g4_component_find(dec, "model.layers.99.self_attn.q_proj.weight_t") == NULL);
    // Typed get: expected vs actual in the message.
    const g4_tensor *t;
    CHECK(g4_get(dec, "lm_head.weight_t", G4_DT_FLOAT16, &t, p->text.hidden, p->text.vocab) == 0);
    CHECK(g4_get(dec, "lm_head.weight_t", G4_DT_FLOAT16, &t, p->text.vocab, p->text.hidden) ==
          G4_EUSER);
    CHECK(strstr(g4_error(), "expected float16 [1024, 64], found float16 [64, 1024]") != NULL);
    CHECK(g4_get(dec, "lm_head.weight_t", G4_DT_FLOAT, &t, p->text.hidden, p->text.vocab) ==
          G4_EUSER);
    // Data: fp16 -> fp32 of an inline and an external tensor are finite and not all zero.
    float buf[64 * 1024];
    CHECK(g4_tensor_to_f32(a, buf) == 0);
    double s = 0;
    for (uint64_t i = 0; i < a->numel; i++) s += fabs(buf[i]);
    CHECK(s > 0 && isfinite(s));
    // Graph navigation.
    const g4_node *cons[4];
    CHECK(g4_onnx_consumers(dec->model, a->name, cons, 4) == 1 &&
          !strcmp(cons[0]->op_type, "MatMul"));
    CHECK(g4_onnx_producer(dec->model, "logits") != NULL);
    CHECK(g4_onnx_input(dec->model, "inputs_embeds") != NULL);
}

// --- bad inputs: copy the fixture, break one thing, expect a one-line EUSER error --------------

static char *copy_fixture(void) {
    char *d = g4t_tmpdir();
    g4t_sh("cp -r '%s'/. '%s'/ && chmod -R u+w '%s'", pkg_dir, d, d);
    return d;
}

static Onnx__ModelProto *read_proto(const char *path) {
    char *bytes;
    size_t n;
    if (g4_read_file(path, &bytes, &n)) return NULL;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, (const uint8_t *)bytes);
    free(bytes);
    return m;
}

static void write_proto(const char *path, Onnx__ModelProto *m) {
    size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = g4_malloc(n);
    onnx__model_proto__pack(m, buf);
    g4_forget_input(path); // read by read_proto: rewriting it is this test's point
    CHECK(g4_write_file_atomic(path, buf, n) == 0);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

static Onnx__TensorProto *find_init(Onnx__ModelProto *m, const char *name) {
    for (size_t i = 0; i < m->graph->n_initializer; i++)
        if (!strcmp(m->graph->initializer[i]->name, name)) return m->graph->initializer[i];
    return NULL;
}

static void set_ext(Onnx__TensorProto *t, const char *key, const char *value) {
    for (size_t i = 0; i < t->n_external_data; i++)
        if (!strcmp(t->external_data[i]->key, key)) {
            free(t->external_data[i]->value);
            t->external_data[i]->value = g4_strdup(value);
        }
}

// Opens dir and checks: user error, one line, containing every needle.
static void expect_error(const char *what, const char *dir, const char *n1, const char *n2,
                         const char *n3) {
    g4_package *p = NULL;
    int rc = g4_package_open(dir, &p);
    const char *e = g4_error();
    CHECK_MSG(rc == G4_EUSER && p == NULL, "%s: expected a user error, got rc %d", what, rc);
    CHECK_MSG(!strchr(e, '\n') && strlen(e) > 0, "%s: message must be one line: %s", what, e);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        CHECK_MSG(!needles[i] || strstr(e, needles[i]), "%s: '%s' not in: %s", what, needles[i], e);
    if (rc == G4_OK) g4_package_close(p);
    printf("  %-34s -> %s\n", what, e);
}

static const char *Q_PROJ = "decoder.model.layers.2.self_attn.q_proj.weight_t";

static void test_bad_inputs(void) {
    char *d, *f;
    printf("bad inputs:\n");

    d = copy_fixture(); // missing component directory
    g4t_sh("rm -rf '%s/vision_encoder'", d);
    expect_error("missing component dir", d, "vision_encoder/model.onnx",
                 "missing vision_encoder component", NULL);
    g4t_rmtree(d);

    d = copy_fixture(); // truncated external data
    f = g4_sprintf("%s/decoder/model.onnx.data", d);
    CHECK(truncate(f, 1000000) == 0);
    expect_error("truncated .onnx.data", d, "decoder/model.onnx", "runs past the end",
                 "truncated");
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // offset past the end of the file
    f = g4_sprintf("%s/decoder/model.onnx", d);
    Onnx__ModelProto *m = read_proto(f);
    set_ext(find_init(m, Q_PROJ), "offset", "99999999");
    write_proto(f, m);
    expect_error("offset past end", d, Q_PROJ, "offset 99999999 is past the end", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // length does not match dims x dtype
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    set_ext(find_init(m, Q_PROJ), "length", "8190");
    write_proto(f, m);
    expect_error("length/dims mismatch", d, Q_PROJ, "length 8190 bytes", "[64, 64] needs 8192");
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // dims changed, so the length no longer matches
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    find_init(m, Q_PROJ)->dims[1] = 65;
    write_proto(f, m);
    expect_error("dims/length mismatch", d, Q_PROJ, "[64, 65] needs 8320", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // unknown dtype
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    find_init(m, Q_PROJ)->data_type = 99;
    write_proto(f, m);
    expect_error("unknown dtype", d, Q_PROJ, "unknown or unsupported dtype 99", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // location escaping the model directory
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    set_ext(find_init(m, Q_PROJ), "location", "../embedding/model.onnx.data");
    write_proto(f, m);
    expect_error("location with ..", d, Q_PROJ, "must be a relative path", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // a non-numeric offset
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    set_ext(find_init(m, Q_PROJ), "offset", "12x");
    write_proto(f, m);
    expect_error("non-numeric offset", d, Q_PROJ, "offset '12x' is not a number", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // two initializers with one name
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    {
        Onnx__TensorProto *t = find_init(m, "decoder.model.layers.3.self_attn.q_proj.weight_t");
        free(t->name);
        t->name = g4_strdup(Q_PROJ);
    }
    write_proto(f, m);
    expect_error("duplicate tensor name", d, "duplicate tensor name", Q_PROJ, NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // inline raw_data of the wrong size
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    find_init(m, "decoder.model.layers.0.input_layernorm.weight")->raw_data.len -= 2;
    write_proto(f, m);
    expect_error("raw_data size", d, "input_layernorm.weight", "raw_data has 126 bytes", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // garbage protobuf
    f = g4_sprintf("%s/embedding/model.onnx", d);
    {
        unsigned long long s = 7;
        uint8_t junk[4096];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)g4t_rand_u64(&s);
        CHECK(g4_write_file_atomic(f, junk, sizeof junk) == 0);
    }
    expect_error("garbage protobuf", d, "embedding/model.onnx", "not a valid ONNX ModelProto",
                 NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // empty model.onnx: decodes, but has no graph
    f = g4_sprintf("%s/embedding/model.onnx", d);
    CHECK(g4_write_file_atomic(f, "", 0) == 0);
    expect_error("empty model.onnx", d, "embedding/model.onnx", "no graph", NULL);
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // wrong JSON type
    g4t_sh("sed -i 's/\"hidden_size\": 64/\"hidden_size\": \"64\"/' '%s/genai_config.json'", d);
    expect_error("wrong JSON type", d, "genai_config.json",
                 "model.decoder.hidden_size: expected an integer, found a string", NULL);
    g4t_rmtree(d);

    d = copy_fixture(); // invalid JSON
    g4t_sh("printf '{\"model\": {' > '%s/genai_config.json'", d);
    expect_error("invalid JSON", d, "genai_config.json", "invalid JSON", NULL);
    g4t_rmtree(d);

    d = copy_fixture(); // config that disagrees with the weights
    g4t_sh("sed -i 's/\"num_hidden_layers\": 10/\"num_hidden_layers\": 11/' '%s/genai_config.json'",
           d);
    expect_error("config vs weights (layers)", d, "decoder/model.onnx", "10 decoder layers",
                 "num_hidden_layers = 11");
    g4t_rmtree(d);

    d = copy_fixture(); // vocab that disagrees with embed_tokens
    g4t_sh("sed -i 's/\"vocab_size\": 1024/\"vocab_size\": 2048/' '%s/genai_config.json'", d);
    expect_error("config vs weights (vocab)", d, "embedding.embed_tokens.weight", "vocab_size 2048",
                 NULL);
    g4t_rmtree(d);

    d = copy_fixture(); // a weight with the wrong shape for the config
    f = g4_sprintf("%s/decoder/model.onnx", d);
    m = read_proto(f);
    {
        Onnx__TensorProto *t = find_init(m, "decoder.model.layers.1.mlp.up_proj.weight_t");
        t->dims[1] = 64; // [64, 64]: 8192 bytes...
        set_ext(t, "length", "8192");
    }
    write_proto(f, m);
    expect_error("weights vs config (ffn)", d, "up_proj.weight_t", "expected [in, out] = [64, 128]",
                 "found [64, 64]");
    free(f);
    g4t_rmtree(d);

    d = copy_fixture(); // missing genai_config.json
    g4t_sh("rm '%s/genai_config.json'", d);
    expect_error("missing genai_config.json", d, "genai_config.json", "cannot open", NULL);
    g4t_rmtree(d);

    d = copy_fixture(); // a rotary table that is not cos/sin of position x frequency
    f = g4_sprintf("%s/decoder/model.onnx.data", d);
    g4t_sh("printf '\\000\\074' | dd of='%s' bs=1 seek=%d conv=notrunc status=none", f,
           983040 + 2 * (16 * 64 + 3)); // local cos row 64, col 3 := 1.0
    expect_error("corrupt RoPE table", d, "rotary_emb_local.cos_cache", "row", NULL);
    free(f);
    g4t_rmtree(d);

    expect_error("not a directory", "/nonexistent/pkg", "/nonexistent/pkg", "not a package", NULL);
}

int main(void) {
    pkg_dir = g4t_env("G4_TINY_PKG");
    g4_package *p;
    int rc = g4_package_open(pkg_dir, &p);
    CHECK_MSG(rc == 0, "%s", g4_error());
    if (rc == 0) {
        test_tensor_table_matches_onnx_listing(p);
        test_config_matches_hf(p);
        test_lookup(p);
        g4_package_close(p);
    }
    // The differently shaped fixtures against their own HF configs (tiny2: GQA 3:1, S S F S F S F;
    // alt-tiny: GQA 8:2, a full layer every 3rd, one MLP width, head_dim 16 / 24).
    const char *others[] = {"tiny2", "alt-tiny"};
    for (int i = 0; i < 2; i++) {
        char *dir = g4_sprintf("%s/%s/package", g4t_env("G4_FIXTURES"), others[i]);
        pkg_dir = dir;
        rc = g4_package_open(dir, &p);
        CHECK_MSG(rc == 0, "%s: %s", others[i], g4_error());
        if (rc == 0) {
            test_config_matches_hf(p);
            g4_package_close(p);
        }
        free(dir);
    }
    pkg_dir = g4t_env("G4_TINY_PKG");
    test_bad_inputs();
    return g4t_finish("test_loader");
}
