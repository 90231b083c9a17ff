// test_eval_prep.c: eval's front ends run ahead on worker threads (eval/prep.h), on the tiny
// package's front-end configs and the committed front-end media (CPU, no towers):
//   - taken in order, each job's result is the one g4_media_load gives that file on this
//     thread (features, mask, patches and positions byte for byte; a missing file's error line
//     in its place), whatever the thread count (0: on the taker's thread), the bound on work
//     ahead, and the taker's pace (seeded random pauses between takes);
//   - the workers never start more than `ahead` jobs beyond the last taken (the memory bound);
//   - a pool freed with results not taken (a run stopped by an error) joins its workers and
//     frees them (ASan: nothing leaks).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "eval/prep.h"
#include "tests/test_util.h"

#define N_JOBS 18

static int same_input(const g4_media_input *a, const g4_media_input *b) {
    if (a->kind != b->kind || a->n_tokens != b->n_tokens || a->truncated != b->truncated) return 0;
    if (a->kind == G4_MEDIA_AUDIO) {
        const g4_audio_features *x = &a->audio, *y = &b->audio;
        return x->n_frames == y->n_frames && x->n_mel == y->n_mel &&
               x->n_soft_tokens == y->n_soft_tokens &&
               !memcmp(x->features, y->features, sizeof(float) * (size_t)x->n_frames * x->n_mel) &&
               !memcmp(x->mask, y->mask, (size_t)x->n_frames);
    }
    const g4_image_features *x = &a->image, *y = &b->image;
    return x->n_patches == y->n_patches && x->patch_dim == y->patch_dim &&
           !memcmp(x->pixel_values, y->pixel_values,
                   sizeof(float) * (size_t)x->n_patches * x->patch_dim) &&
           !memcmp(x->position_ids, y->position_ids, sizeof(int32_t) * 2 * (size_t)x->n_patches);
}

int main(void) {
    const char *fixtures = g4t_env("G4_FIXTURES"), *pkg_dir = g4t_env("G4_TINY_PKG");
    g4_package *pkg;
    g4_media_encoder *enc;
    if (g4_package_open(pkg_dir, &pkg) || g4_media_encoder_new(pkg, g4_backend_cpu(), &enc)) {
        fprintf(stderr, "FAIL %s: %s\n", pkg_dir, g4_error());
        return 1;
    }
    // audio and images of different sizes in turn, and a file that is not there
    static const char *files[] = {
        "speech_7.3s_8k.flac", "photo.jpg",      "silence_1s.wav",  "gray.jpg",    "missing.wav",
        "stereo_48k_16.wav",   "interlaced.png", "tone_1s_f32.wav", "big_down.png"};
    enum { N_FILES = sizeof files / sizeof files[0] };
    char *paths[N_FILES];
    g4_prep_job jobs[N_JOBS];
    g4_prep_result want[N_JOBS];
    for (int f = 0; f < N_FILES; f++)
        paths[f] = g4_sprintf("%s/frontends/media/%s", fixtures, files[f]);
    for (int i = 0; i < N_JOBS; i++) {   // the reference: each file on this thread
        const int f = (i * 4) % N_FILES; // (4 and 9 coprime: every file, out of order)
        const char *x = strrchr(files[f], '.');
        jobs[i] = (g4_prep_job){
            strcmp(x, ".jpg") && strcmp(x, ".png") ? G4_MEDIA_AUDIO : G4_MEDIA_IMAGE, paths[f]};
        memset(&want[i], 0, sizeof want[i]);
        want[i].rc = g4_media_load(enc, jobs[i].kind, jobs[i].path, &want[i].in);
        if (want[i].rc) want[i].why = g4_strdup(g4_error());
    }
    int n_missing = 0;
    for (int i = 0; i < N_JOBS; i++) { // every file loads alone but the missing one
        const int missing = strstr(jobs[i].path, "missing.wav") != NULL;
        n_missing += missing;
        CHECK_MSG(missing ? want[i].rc == G4_EUSER && strstr(want[i].why, "missing.wav")
                          : want[i].rc == G4_OK,
                  "%s alone: rc %d (%s)", jobs[i].path, want[i].rc, want[i].why ? want[i].why : "");
    }
    CHECK_INT(n_missing, 2);

    const struct { int threads, ahead; } cases[] = {{0, 1}, {1, 1}, {3, 2}, {8, 5}};
    unsigned long long seed = 12345;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nt = cases[c].threads, ahead = cases[c].ahead;
        g4_prep_pool *p = g4_prep_pool_new(enc, jobs, N_JOBS, nt, ahead);
        for (int i = 0; i < N_JOBS; i++) {
            if (g4t_rand_u64(&seed) % 2) usleep((useconds_t)(g4t_rand_u64(&seed) % 3000));
            g4_prep_result r;
            double waited;
            g4_prep_pool_take(p, i, &r, &waited);
            CHECK_MSG(r.rc == want[i].rc &&
                          (r.rc ? !strcmp(r.why, want[i].why) : same_input(&r.in, &want[i].in)),
                      "threads %d, ahead %d: job %d (%s): rc %d (%s), want rc %d: another "
                      "result than alone",
                      nt, ahead, i, jobs[i].path, r.rc, r.why ? r.why : "", want[i].rc);
            CHECK(waited >= 0 && r.seconds >= 0);
            g4_media_input_free(&r.in);
            free(r.why);
        }
        CHECK_MSG(g4_prep_pool_most_ahead(p) <= ahead, "threads %d: %d jobs ahead, bound %d", nt,
                  g4_prep_pool_most_ahead(p), ahead);
        g4_prep_pool_free(p);
    }
    // stopped early: two taken, the rest prepared (or being prepared) and dropped
    g4_prep_pool *p = g4_prep_pool_new(enc, jobs, N_JOBS, 3, 4);
    for (int i = 0; i < 2; i++) {
        g4_prep_result r;
        double waited;
        g4_prep_pool_take(p, i, &r, &waited);
        CHECK(r.rc == want[i].rc);
        g4_media_input_free(&r.in);
        free(r.why);
    }
    usleep(20000); // (the workers fill the window)
    CHECK(g4_prep_pool_most_ahead(p) <= 4);
    g4_prep_pool_free(p);
    // a pool that is never taken from
    g4_prep_pool_free(g4_prep_pool_new(enc, jobs, N_JOBS, 2, 3));

    for (int i = 0; i < N_JOBS; i++) {
        g4_media_input_free(&want[i].in);
        free(want[i].why);
    }
    for (int f = 0; f < N_FILES; f++) free(paths[f]);
    g4_media_encoder_free(enc);
    g4_package_close(pkg);
    return g4t_finish("test_eval_prep");
}
