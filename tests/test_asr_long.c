// test_asr_long.c: long-form `g4cu asr` (engine/asr_window.h's rule, tools/asr_long.c):
//   1. the windows (count, bounds, overlap, segment boundaries in the middle of each overlap,
//      segments tiling the audio) at several lengths, and the stitch (the longest suffix of a
//      window's tokens that the next one starts with is dropped) on built token lists, where
//      duplicated text is known;
//   2. on a 63 s WAV made here from the fixture clips (31 s + 1 s + 31 s, 16 kHz): --json has
//      the three windows the rule gives, their segment times, and per window the tokens that
//      window gets when it is cut here (by this test's own loop, written as a float WAV) and
//      transcribed alone with `g4cu asr` (the weights are random: the words mean nothing, the
//      windowing and the stitching are what is checked), stitched as the rule says; --srt and
//      --vtt carry the same segments as cues.
// CPU only: runs in CI.
#include <cjson/cJSON.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/asr_window.h"
#include "engine/audio_fe.h"
#include "tests/test_util.h"
#include "tools/asr_cues.h"

static void test_windows(void) {
    const int64_t W = 480000, O = W / 6;
    const int64_t lengths[] = {1, 1000, W, W + 1, 63 * 16000, 1600000, 10 * 60 * 16000 + 7};
    for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
        const int64_t n = lengths[c];
        g4_asr_window *w;
        int k = g4_asr_windows(n, W, O, &w);
        // the count: the fewest windows of step W - O that reach n
        int want = 1;
        while ((int64_t)(want - 1) * (W - O) + W < n) want++;
        CHECK_MSG(k == want, "n %lld: %d windows, expected %d", (long long)n, k, want);
        int ok =
            w[0].start == 0 && w[k - 1].end == n && w[0].seg_start == 0 && w[k - 1].seg_end == n;
        for (int i = 0; i < k; i++) {
            ok &= w[i].end - w[i].start <= W && w[i].end > w[i].start;
            ok &= w[i].seg_start >= w[i].start && w[i].seg_end <= w[i].end;
            if (i) {
                ok &= w[i].start == w[i - 1].start + (W - O); // consecutive, overlap O
                ok &= w[i - 1].end - w[i].start == O || i == k - 1;
                ok &= w[i].seg_start == w[i - 1].seg_end; // segments tile the audio
                ok &= w[i].seg_start == (w[i].start + w[i - 1].end) / 2;
            }
        }
        CHECK_MSG(ok, "n %lld: window bounds", (long long)n);
        free(w);
    }
    const struct {
        int32_t a[6], b[6];
        int na, nb, want;
    } cases[] = {
        {{1, 2, 3, 4}, {3, 4, 5}, 4, 3, 2},          // "3 4" heard twice
        {{1, 2}, {3}, 2, 1, 0},                      // nothing shared
        {{5, 5, 5}, {5, 5}, 3, 2, 2},                // the longest
        {{1, 2, 3}, {2, 9, 3}, 3, 3, 0},             // a match must be a suffix and a prefix
        {{7, 8}, {7, 8}, 2, 2, 2},                   // all of it
        {{0}, {1}, 0, 1, 0},                         // an empty window
        {{4, 1, 2, 1, 2}, {1, 2, 1, 2, 6}, 5, 5, 4}, // the longest of several (2 and 4)
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        CHECK_INT(g4_asr_overlap(cases[c].a, cases[c].na, cases[c].b, cases[c].nb), cases[c].want);
}

static const char *g4cu, *pkg, *tok;
static char *tmp;

static float *read_sound(const char *path, int64_t *n) {
    SF_INFO info = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    CHECK_MSG(sf && info.channels == 1 && info.samplerate == 16000, "%s: 16 kHz mono", path);
    if (!sf) exit(g4t_finish("test_asr_long"));
    float *x = g4_malloc(sizeof(float) * (size_t)info.frames);
    *n = sf_readf_float(sf, x, info.frames);
    sf_close(sf);
    return x;
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO info = {.samplerate = 16000, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    CHECK(sf && sf_writef_float(sf, x, n) == n);
    if (sf) sf_close(sf);
}

// `g4cu asr` on one window alone: its tokens without the EOS that ended it.
static int window_tokens(const char *wav, int32_t *out, int cap) {
    char *res = g4_sprintf("%s/alone.json", tmp);
    int rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --json >'%s' 2>/dev/null",
                    g4cu, pkg, wav, tok, res);
    CHECK_INT(rc, 0);
    char *s = g4t_slurp("%s", res);
    cJSON *j = cJSON_Parse(s);
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    int n = 0;
    for (const cJSON *e = t ? t->child : NULL; e && n < cap; e = e->next) out[n++] = e->valueint;
    const cJSON *stop = cJSON_GetObjectItem(j, "stop_reason");
    if (n && cJSON_IsString(stop) && !strcmp(stop->valuestring, "eos")) n--;
    cJSON_Delete(j);
    free(s), free(res);
    return n;
}

static void test_cli(void) {
    char *media = g4_sprintf("%s/frontends/media", g4t_env("G4_FIXTURES"));
    char *path_a = g4_sprintf("%s/long_31s.flac", media);
    char *path_b = g4_sprintf("%s/tone_1s_f32.wav", media);
    int64_t n31, n1;
    float *a = read_sound(path_a, &n31);
    float *b = read_sound(path_b, &n1);
    free(path_a), free(path_b), free(media);
    const int64_t n = 2 * n31 + n1;
    float *x = g4_malloc(sizeof(float) * (size_t)n);
    memcpy(x, a, sizeof(float) * (size_t)n31);
    memcpy(x + n31, b, sizeof(float) * (size_t)n1);
    memcpy(x + n31 + n1, a, sizeof(float) * (size_t)n31);
    char *longwav = g4_sprintf("%s/long.wav", tmp);
    write_wav(longwav, x, n);

    // The windows by the rule, written out here; each transcribed alone.
    const int64_t W = G4_AUDIO_MAX_SAMPLES, O = W / 6;
    int64_t start[8], end[8];
    int k = 0;
    for (int64_t s = 0;; s += W - O) {
        start[k] = s;
        end[k] = s + W < n ? s + W : n;
        k++;
        if (s + W >= n) break;
    }
    CHECK_INT(k, 3);
    int32_t toks[8][64], kept[8][64];
    int nt[8], nk[8], drop[8];
    for (int i = 0; i < k; i++) {
        char *wav = g4_sprintf("%s/w%d.wav", tmp, i);
        write_wav(wav, x + start[i], end[i] - start[i]);
        nt[i] = window_tokens(wav, toks[i], 64);
        // the stitch, by this test's own loop: the longest suffix of the previous window's
        // tokens that this window starts with
        drop[i] = 0;
        for (int m = i ? (nt[i - 1] < nt[i] ? nt[i - 1] : nt[i]) : 0; m > 0 && !drop[i]; m--)
            if (!memcmp(toks[i - 1] + nt[i - 1] - m, toks[i], sizeof(int32_t) * (size_t)m))
                drop[i] = m;
        nk[i] = nt[i] - drop[i];
        memcpy(kept[i], toks[i] + drop[i], sizeof(int32_t) * (size_t)nk[i]);
        free(wav);
    }

    char *res = g4_sprintf("%s/long.json", tmp);
    int rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --json >'%s' 2>'%s/err'", g4cu,
                    pkg, longwav, tok, res, tmp);
    CHECK_INT(rc, 0);
    char *s = g4t_slurp("%s", res);
    cJSON *j = cJSON_Parse(s);
    CHECK_MSG(j != NULL, "asr --json on the long file: %.200s", s);
    const cJSON *segs = cJSON_GetObjectItem(j, "segments");
    CHECK_INT(cJSON_GetArraySize(segs), k);
    CHECK(fabs(cJSON_GetObjectItem(j, "seconds")->valuedouble - (double)n / 16000) < 1e-9);
    CHECK(cJSON_GetObjectItem(j, "window_s")->valuedouble == 30.0 &&
          cJSON_GetObjectItem(j, "overlap_s")->valuedouble == 5.0);
    int i = 0;
    for (const cJSON *g = segs ? segs->child : NULL; g && i < k; g = g->next, i++) {
        const double want_start = i ? (start[i] + end[i - 1]) / 2 / 16000.0 : 0;
        const double want_end = i + 1 < k ? (start[i + 1] + end[i]) / 2 / 16000.0 : n / 16000.0;
        CHECK_MSG(fabs(cJSON_GetObjectItem(g, "start")->valuedouble - want_start) < 1e-6 &&
                      fabs(cJSON_GetObjectItem(g, "end")->valuedouble - want_end) < 1e-6,
                  "segment %d: %g-%g, expected %g-%g", i,
                  cJSON_GetObjectItem(g, "start")->valuedouble,
                  cJSON_GetObjectItem(g, "end")->valuedouble, want_start, want_end);
        CHECK(fabs(cJSON_GetObjectItem(g, "window_start")->valuedouble - start[i] / 16000.0) <
              1e-9);
        CHECK_INT(cJSON_GetObjectItem(g, "window_tokens")->valueint, nt[i]);
        CHECK_INT(cJSON_GetObjectItem(g, "dropped_tokens")->valueint, drop[i]);
        const cJSON *t = cJSON_GetObjectItem(g, "tokens");
        int same = cJSON_GetArraySize(t) == nk[i], q = 0;
        for (const cJSON *e = t ? t->child : NULL; e && same; e = e->next, q++)
            same = e->valueint == kept[i][q];
        CHECK_MSG(same, "segment %d: the tokens of the window run alone, stitched", i);
    }
    CHECK(nt[0] > 0);
    char *err = g4t_slurp("%s/err", tmp);
    CHECK_MSG(!strstr(err, "only the first"), "long-form: no audio dropped");
    free(err);

    // --srt / --vtt: each segment's words as cues (checked by parsing the file back): cue
    // numbers 1, 2, ... (SubRip), a timing line and one non-empty text line per cue, the
    // cues of segment i tiling its span (from the middles of the overlaps to the end of the
    // audio) with each cue's words in order, every cue at most 7 s unless it is one word
    const char *fmts[2] = {"srt", "vtt"};
    const int64_t bound[4] = {0, (start[1] + end[0]) / 2, (start[2] + end[1]) / 2, n};
    for (int f = 0; f < 2; f++) {
        char *out = g4_sprintf("%s/long.%s", tmp, fmts[f]);
        rc = g4t_sh("'%s' asr '%s' '%s' --tokenizer '%s' --max-new 3 --%s >'%s' 2>'%s/err'", g4cu,
                    pkg, longwav, tok, fmts[f], out, tmp);
        CHECK_INT(rc, 0);
        char *c = g4t_slurp("%s", out), *e = g4t_slurp("%s/err", tmp);
        CHECK_MSG(strstr(e, "asr: window 3/3 done (63.0 of 63.0 s)"), "progress: %s", e);
        free(e);
        const char *p = c;
        if (f == 1) {
            CHECK(!strncmp(p, "WEBVTT\n\n", 8));
            p += 8;
        }
        char words[3][512] = {{0}}; // the words of each segment's cues, space-joined
        double seg_first[3] = {-1, -1, -1}, seg_last[3] = {-1, -1, -1}, prev_end = 0;
        int n_cues = 0, bad = 0;
        while (*p && !bad) {
            int num = 0, used = 0, h0, m0, s0, ms0, h1, m1, s1, ms1;
            char sep0, sep1;
            if (f == 0 && (sscanf(p, "%d\n%n", &num, &used) != 1 || num != n_cues + 1)) bad = 1;
            p += used;
            if (bad || sscanf(p, "%d:%d:%d%c%d --> %d:%d:%d%c%d\n%n", &h0, &m0, &s0, &sep0, &ms0,
                              &h1, &m1, &s1, &sep1, &ms1, &used) != 10 ||
                sep0 != (f ? '.' : ','))
                bad = 2;
            if (bad) break;
            p += used;
            const char *nl = strchr(p, '\n');
            if (!nl || nl == p || nl[1] != '\n') { // one non-empty text line, then a blank one
                bad = 3;
                break;
            }
            const double t0 = h0 * 3600 + m0 * 60 + s0 + ms0 / 1000.0,
                         t1 = h1 * 3600 + m1 * 60 + s1 + ms1 / 1000.0;
            int seg = 0;
            while (seg < 2 && t0 >= bound[seg + 1] / 16000.0 - 1e-3) seg++;
            if (seg_first[seg] < 0) seg_first[seg] = t0;
            else if (fabs(t0 - prev_end) > 1.5e-3) bad = 4; // cues of a segment are contiguous
            seg_last[seg] = prev_end = t1;
            const int one_word = !memchr(p, ' ', (size_t)(nl - p));
            if (t1 - t0 > 7.0 + 1e-3 && !one_word) bad = 5;
            size_t wl = strlen(words[seg]);
            snprintf(words[seg] + wl, sizeof words[seg] - wl, "%s%.*s", wl ? " " : "",
                     (int)(nl - p), p);
            p = nl + 2;
            n_cues++;
        }
        CHECK_MSG(!bad && n_cues >= 1, "%s: cue %d is malformed (%d)", fmts[f], n_cues + 1, bad);
        i = 0;
        for (const cJSON *g = segs ? segs->child : NULL; g && i < 3; g = g->next, i++) {
            // the segment's words, whitespace-normalised
            char want[512] = "";
            size_t wl = 0;
            for (const char *q = cJSON_GetObjectItem(g, "text")->valuestring; *q;) {
                while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r') q++;
                if (!*q) break;
                if (wl && wl + 1 < sizeof want) want[wl++] = ' ';
                while (*q && *q != ' ' && *q != '\n' && *q != '\t' && *q != '\r' &&
                       wl + 1 < sizeof want)
                    want[wl++] = *q++;
                want[wl] = 0;
            }
            CHECK_MSG(!strcmp(words[i], want), "%s: segment %d's cues say '%s', its text '%s'",
                      fmts[f], i, words[i], want);
            if (want[0]) // (a segment with no words has no cue)
                CHECK_MSG(fabs(seg_first[i] - bound[i] / 16000.0) < 1.5e-3 &&
                              fabs(seg_last[i] - bound[i + 1] / 16000.0) < 1.5e-3,
                          "%s: segment %d's cues span %g-%g, expected %g-%g", fmts[f], i,
                          seg_first[i], seg_last[i], bound[i] / 16000.0, bound[i + 1] / 16000.0);
        }
        free(c), free(out);
    }
    rc = g4t_sh("'%s' asr '%s' '%s' '%s' --srt >/dev/null 2>&1", g4cu, pkg, longwav, longwav);
    CHECK_INT(rc, 1);
    rc = g4t_sh("'%s' asr '%s' '%s' --srt --vtt >/dev/null 2>'%s/err'", g4cu, pkg, longwav, tmp);
    char *both = g4t_slurp("%s/err", tmp);
    CHECK_MSG(rc == 1 && strstr(both, "--srt and --vtt exclude each other"), "--srt --vtt: %d %s",
              rc, both);
    free(both);
    cJSON_Delete(j);
    free(s), free(res), free(x), free(a), free(b), free(longwav);
}

// The cue splitter on texts whose cues are worked out by hand (times: a segment's span shared
// out over the words by characters, one more per word for the gap).
static void test_cues(void) {
    struct {
        const char *text;
        double t0, t1;
        int n;
        const char *cue[6];
        double end[6];
    } cases[] = {
        // a leading line break (what gave the blank line and the empty cue): dropped; two
        // sentences, two cues; "Hello there." is 13 of 26 character units: ends at 5 s
        {"\nHello there. How are you?", 0, 10, 2, {"Hello there.", "How are you?"}, {5, 10}},
        {" \n \n", 0, 10, 0, {0}, {0}}, // no words: no cue
        {"", 3, 4, 0, {0}, {0}},
        // no punctuation, 25 s: words of 2.5 s, two a cue (three would be 7.5 s)
        {"aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj", 0, 25, 5,
         {"aaaa bbbb", "cccc dddd", "eeee ffff", "gggg hhhh", "iiii jjjj"}, {5, 10, 15, 20, 25}},
        // past 7 s: back to the pause (the comma), then the words that fit (29 units over 12 s)
        {"one two, three four five six", 0, 12, 3, {"one two,", "three four five", "six"},
         {9 * 12.0 / 29, 25 * 12.0 / 29, 12}},
        // one word longer than the limit: one cue, the whole span; a line break ends a cue
        {"Supercalifragilistic", 30, 50, 1, {"Supercalifragilistic"}, {50}},
        {"up\ndown", 0, 2, 2, {"up", "down"}, {0.75, 2}}, // (3 of 8 units)
    };
    int checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        g4_asr_cue *q;
        const int n = g4_asr_cues(cases[c].text, cases[c].t0, cases[c].t1, 7.0, &q);
        CHECK_MSG(n == cases[c].n, "case %zu: %d cues, expected %d", c, n, cases[c].n);
        for (int i = 0; i < n && i < cases[c].n; i++, checked++) {
            const double st = i ? q[i - 1].end : cases[c].t0;
            CHECK_MSG(!strcmp(q[i].text, cases[c].cue[i]) && fabs(q[i].start - st) < 1e-9 &&
                          fabs(q[i].end - cases[c].end[i]) < 1e-9,
                      "case %zu cue %d: '%s' %g-%g, expected '%s' %g-%g", c, i, q[i].text,
                      q[i].start, q[i].end, cases[c].cue[i], st, cases[c].end[i]);
        }
        g4_asr_cues_free(q, n);
    }
    CHECK_INT(checked, 13);
}

int main(void) {
    test_windows();
    test_cues();
    g4cu = g4t_env("G4CU");
    pkg = g4t_env("G4_TINY_PKG");
    tok = g4_sprintf("%s/chat/chat_bpe.json", g4t_env("G4_FIXTURES"));
    tmp = g4t_tmpdir();
    test_cli();
    g4t_rmtree(tmp);
    return g4t_finish("test_asr_long");
}
