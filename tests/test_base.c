// test_base.c: fp16/bf16 conversion, checked against the compiler's own _Float16 (an independent
// implementation), the string map, overflow-checked sizes, and the typed JSON reader's errors.
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "loader/json.h"
#include "loader/onnx_model.h"
#include "tests/test_util.h"

static void test_f16_to_f32_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 ref;
        uint16_t b = (uint16_t)h;
        memcpy(&ref, &b, 2);
        float want = (float)ref, got = g4_f16_to_f32(b);
        if (isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "%d of 65536 half values convert wrongly", bad);
}

static void test_f32_to_f16(void) {
    unsigned long long s = 12345;
    int bad = 0;
    // random bit patterns cover normals, subnormals, overflow, NaN and inf
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)g4t_rand_u64(&s);
        float f;
        memcpy(&f, &bits, 4);
        _Float16 ref = (_Float16)f;
        uint16_t want, got = g4_f32_to_f16(f);
        memcpy(&want, &ref, 2);
        if (isnan(f) ? (got & 0x7c00) != 0x7c00 || (got & 0x3ff) == 0 : want != got) bad++;
    }
    // ties and edges
    const float edge[] = {0.0f,     -0.0f,      65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f,
                          5.96e-08f, 2.98e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1e-10f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            float f = sgn ? -edge[i] : edge[i];
            _Float16 ref = (_Float16)f;
            uint16_t want;
            memcpy(&want, &ref, 2);
            if (want != g4_f32_to_f16(f)) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d float values round to fp16 differently from _Float16", bad);
    CHECK(g4_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(g4_bf16_to_f32(0xc040) == -3.0f);
}

static void test_strmap(void) {
    g4_strmap m;
    g4_strmap_init(&m, 2);
    char keys[500][16];
    for (int i = 0; i < 500; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i * 7);
        CHECK(g4_strmap_put(&m, keys[i], i) == 1);
    }
    CHECK(g4_strmap_put(&m, keys[3], 99) == 0); // duplicate keeps the first value
    int bad = 0;
    for (int i = 0; i < 500; i++) bad += g4_strmap_get(&m, keys[i]) != i;
    CHECK_INT(bad, 0);
    CHECK_INT(g4_strmap_get(&m, "absent"), -1);
    g4_strmap_free(&m);
}

static void test_sizes(void) {
    uint64_t r;
    CHECK(g4_mul_u64(1ull << 32, 1ull << 31, &r) && r == 1ull << 63);
    CHECK(!g4_mul_u64(1ull << 32, 1ull << 32, &r));
    CHECK(!g4_add_u64(UINT64_MAX, 1, &r));
}

static void test_json_errors(void) {
    const char *doc = "{\"model\": {\"n\": 3, \"s\": \"x\", \"f\": 1.5, \"l\": [1, 2], \"b\": true}}";
    g4_json j;
    CHECK(g4_json_parse(doc, strlen(doc), "cfg.json", &j) == G4_OK);
    int v, n, vals[4];
    double d;
    char *s;
    CHECK(g4_json_int(&j, j.root, "model.n", 1, 0, &v) == G4_OK && v == 3);
    CHECK(g4_json_int(&j, j.root, "model.s", 1, 0, &v) == G4_EUSER);
    CHECK(strstr(g4_error(), "cfg.json: model.s: expected an integer, found a string") != NULL);
    CHECK(g4_json_int(&j, j.root, "model.f", 1, 0, &v) == G4_EUSER); // 1.5 is not an integer
    CHECK(g4_json_int(&j, j.root, "model.missing", 1, 0, &v) == G4_EUSER);
    CHECK(strstr(g4_error(), "model.missing is missing") != NULL);
    CHECK(g4_json_int(&j, j.root, "model.missing", 0, 42, &v) == G4_OK && v == 42);
    CHECK(g4_json_num(&j, j.root, "model.f", 1, 0, &d) == G4_OK && d == 1.5);
    CHECK(g4_json_str(&j, j.root, "model.n", 1, &s) == G4_EUSER);
    CHECK(g4_json_int_list(&j, j.root, "model.l", 1, vals, 4, &n) == G4_OK && n == 2 &&
          vals[1] == 2);
    CHECK(g4_json_int_list(&j, j.root, "model.n", 1, vals, 4, &n) == G4_OK && n == 1);
    CHECK(g4_json_int_list(&j, j.root, "model.l", 1, vals, 1, &n) == G4_EUSER); // too many
    CHECK(g4_json_bool(&j, j.root, "model.b", 1, 0, &v) == G4_OK && v == 1);
    g4_json_close(&j);
    CHECK(g4_json_parse("{\"a\": ", 6, "bad.json", &j) == G4_EUSER);
    CHECK(strstr(g4_error(), "bad.json: invalid JSON") != NULL);
}

// Element i of a dtype array set to v (rounded to the dtype).
static void put_value(uint8_t *buf, int dtype, uint64_t i, double v) {
    float f = (float)v;
    uint16_t h = dtype == G4_DT_FLOAT16 ? g4_f32_to_f16(f) : g4_bf16_round(f);
    if (dtype == G4_DT_DOUBLE) memcpy(buf + 8 * i, &v, 8);
    else if (dtype == G4_DT_FLOAT) memcpy(buf + 4 * i, &f, 4);
    else memcpy(buf + 2 * i, &h, 2);
}

// The word-parallel NaN/Inf scan (g4_tensor_nonfinite) against an element-by-element isfinite
// of the converted values: every dtype, lengths around the word and block sizes, bad values
// at the start, the end, block edges and random places, NaN and both infinities.
static void test_nonfinite(void) {
    unsigned long long s = 99;
    const int dtypes[] = {G4_DT_FLOAT16, G4_DT_BFLOAT16, G4_DT_FLOAT, G4_DT_DOUBLE};
    const uint64_t lens[] = {0, 1, 3, 4, 5, 7, 8, 9, 4096 * 4 - 1, 4096 * 4, 4096 * 4 + 3, 50001};
    int bad_count = 0, bad_first = 0, cases = 0;
    for (size_t d = 0; d < 4; d++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int trial = 0; trial < 6; trial++) {
                const uint64_t n = lens[li];
                const int es = dtypes[d] == G4_DT_FLOAT ? 4 : dtypes[d] == G4_DT_DOUBLE ? 8 : 2;
                uint8_t *buf = g4_malloc((size_t)n * es + 1);
                for (uint64_t i = 0; i < n; i++) { // finite values of any exponent
                    double v =
                        (g4t_rand_uniform(&s, -1, 1)) * pow(2, (int)(g4t_rand_u64(&s) % 20) - 10);
                    put_value(buf, dtypes[d], i, v);
                }
                const double specials[3] = {NAN, INFINITY, -INFINITY};
                const int n_bad = n == 0 ? 0 : trial; // 0..5 bad values
                for (int k = 0; k < n_bad; k++) {
                    uint64_t at = k == 0   ? n - 1
                                  : k == 1 ? 0
                                  : k == 2 ? (n / 4096) * 4096 % n
                                           : g4t_rand_u64(&s) % n;
                    const double v = specials[g4t_rand_u64(&s) % 3];
                    put_value(buf, dtypes[d], at, v);
                }
                g4_tensor t = {.name = "t",
                               .dtype = dtypes[d],
                               .ndim = 1,
                               .dims = {(int64_t)n},
                               .numel = n,
                               .nbytes = n * (uint64_t)es,
                               .data = n ? buf : NULL};
                uint64_t want = 0, want_first = 0, first = 0;
                for (uint64_t i = 0; i < n; i++)
                    if (!isfinite(g4_tensor_get(&t, i)) && want++ == 0) want_first = i;
                const uint64_t got = g4_tensor_nonfinite(&t, &first);
                bad_count += got != want;
                bad_first += want && first != want_first;
                cases++;
                free(buf);
            }
    CHECK_MSG(bad_count == 0 && bad_first == 0,
              "%d of %d cases count wrong, %d find the wrong first", bad_count, cases, bad_first);
    g4_tensor u8 = {.name = "u",
                    .dtype = G4_DT_UINT8,
                    .numel = 4,
                    .nbytes = 4,
                    .data = (const uint8_t *)"\xff\xff\xff\xff"};
    CHECK(g4_tensor_nonfinite(&u8, NULL) == 0); // integers are never NaN
}

// Inputs: regular files only (a FIFO is refused without blocking), bounded; outputs: never a
// directory or an input (by inode, whatever the name), a device or a FIFO written in place; a stale input (its
// name now another file) does not count; output directories not inside an input package.
static void test_files(void) {
    char *d = g4t_tmpdir();
    char *fifo = g4_sprintf("%s/fifo", d), *f = g4_sprintf("%s/f.txt", d),
         *g = g4_sprintf("%s/g.txt", d);
    CHECK(mkfifo(fifo, 0644) == 0);
    char *text;
    size_t n;
    CHECK(g4_read_file(fifo, &text, &n) == G4_EUSER &&
          strstr(g4_error(), "is a FIFO (named pipe), not a regular file"));
    CHECK(g4_read_file("/dev/zero", &text, &n) == G4_EUSER &&
          strstr(g4_error(), "is a character device"));
    CHECK(g4_read_file(d, &text, &n) == G4_EUSER && strstr(g4_error(), "is a directory"));
    CHECK(g4_write_file_atomic(f, "0123456789", 10) == G4_OK);
    CHECK(g4_read_file_max(f, 9, &text, &n) == G4_EUSER &&
          strstr(g4_error(), "10 bytes, over the 9-byte limit"));
    CHECK(g4_check_output(f) == G4_OK); // not read yet
    CHECK(g4_read_file_max(f, 10, &text, &n) == G4_OK && n == 10 && !strcmp(text, "0123456789"));
    free(text);
    // now an input: refused under its name, a hard link and another spelling
    CHECK(g4_write_file_atomic(f, "x", 1) == G4_EUSER &&
          strstr(g4_error(), "is an input of this command"));
    char *lnk = g4_sprintf("%s/link", d), *other = g4_sprintf("%s/./f.txt", d);
    CHECK(link(f, lnk) == 0);
    CHECK(g4_check_output(lnk) == G4_EUSER && g4_check_output(other) == G4_EUSER);
    int fd;
    CHECK(g4_open_output_append(f, &fd) == G4_EUSER);
    // a stale input: the name now holds another file
    unlink(lnk);
    CHECK(g4_write_file_atomic(g, "y", 1) == G4_OK && rename(g, f) == 0);
    CHECK_MSG(g4_check_output(f) == G4_OK, "%s", g4_error());
    g4_forget_input(f);
    // a character device or a FIFO is written in place, never replaced by a file (issue 34);
    // a file appended to (and read back) must still be a regular one
    struct stat null_st;
    CHECK(g4_check_output("/dev/null") == G4_OK);
    CHECK(g4_write_file_atomic("/dev/null", "x", 1) == G4_OK && stat("/dev/null", &null_st) == 0 &&
          S_ISCHR(null_st.st_mode));
    CHECK(g4_check_output(fifo) == G4_OK);
    CHECK(g4_check_output(d) == G4_EUSER && strstr(g4_error(), "is a directory"));
    CHECK(g4_open_output_append(fifo, &fd) == G4_EUSER && strstr(g4_error(), "is a FIFO"));
    // output directories: not inside an input directory, however named
    char *pkg = g4_sprintf("%s/pkg", d), *sub = g4_sprintf("%s/pkg/a/b", d),
         *sym = g4_sprintf("%s/sym", d);
    g4t_sh("mkdir -p '%s' && ln -s '%s' '%s'", sub, pkg, sym);
    CHECK(g4_check_output_dir(sub) == G4_OK);
    g4_note_input_dir(pkg);
    CHECK(g4_check_output_dir(sub) == G4_EUSER &&
          strstr(g4_error(), "is inside the input package"));
    char *new_in_sym = g4_sprintf("%s/new", sym), *beside = g4_sprintf("%s/out", d);
    CHECK(g4_check_output_dir(new_in_sym) == G4_EUSER); // not made yet: its parent is checked
    CHECK(g4_check_output_dir(pkg) == G4_EUSER);
    CHECK(g4_check_output_dir(beside) == G4_OK);
    // stdin-like reads are bounded too
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "abcdef", 6) == 6);
    close(p[1]);
    CHECK(g4_read_fd(p[0], "stdin", 5, &text, &n) == G4_EUSER &&
          strstr(g4_error(), "stdin: more than 5 bytes"));
    close(p[0]);
    free(fifo), free(f), free(g), free(lnk), free(other), free(pkg), free(sub), free(sym);
    free(new_in_sym), free(beside);
    g4t_rmtree(d);
}

// G4_REQUIRE's contract: a false precondition ends the process with exit code 2 and one line
// naming the message, the values and the condition; a true one does nothing.
static void test_require(void) {
    G4_REQUIRE(1 + 1 == 2, "never printed %d", 1);
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        const int rows = 3;
        G4_REQUIRE(rows == 4, "op x: rows %d, expected 4", rows);
        _exit(0);
    }
    close(fds[1]);
    char buf[512] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 2,
              "G4_REQUIRE: status %d, expected exit 2", status);
    CHECK_MSG(strstr(buf, "g4cu: internal error: op x: rows 3, expected 4: requires rows == 4 (") ==
                  buf,
              "G4_REQUIRE printed '%s'", buf);
    CHECK_MSG(strchr(buf, '\n') == buf + strlen(buf) - 1, "G4_REQUIRE: not one line: '%s'", buf);
}

// g4_error_rename: every occurrence replaced, longer or shorter; the message cut at the buffer's
// end (1023 characters) when the new name makes it longer, never past it.
static void test_error_rename(void) {
    g4_fail(G4_EUSER, "/proc/self/fd/3: bad; /proc/self/fd/3 again");
    g4_error_rename("/proc/self/fd/3", "audio (16 bytes)");
    CHECK_MSG(!strcmp(g4_error(), "audio (16 bytes): bad; audio (16 bytes) again"), "got '%s'",
              g4_error());
    g4_error_rename("audio (16 bytes)", "a");
    CHECK_MSG(!strcmp(g4_error(), "a: bad; a again"), "got '%s'", g4_error());
    g4_error_rename("", "x"); // (nothing to find: unchanged)
    CHECK_MSG(!strcmp(g4_error(), "a: bad; a again"), "got '%s'", g4_error());
    char big[1100];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    g4_fail(G4_EUSER, "a%.1000s", big);
    g4_error_rename("a", big);
    CHECK_MSG(strlen(g4_error()) == 1023 && g4_error()[0] == 'y', "got %zu characters",
              strlen(g4_error()));
}

int main(void) {
    test_error_rename();
    test_f16_to_f32_exhaustive();
    test_f32_to_f16();
    test_strmap();
    test_sizes();
    test_json_errors();
    test_nonfinite();
    test_files();
    test_require();
    return g4t_finish("test_base");
}
