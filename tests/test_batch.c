// test_batch.c: continuous batching (engine/batch.h through the public g4cu_batch_* API) on the
// tiny fixture, CPU backend. Each request run in a batch must give exactly the tokens, text and
// finish reason it gives alone on a g4cu_state (g4cu_generate, the one-state path). Every case
// runs twice (main), once per kind of round: prompts as rows of the decode step (the default),
// then G4_BATCH_PROMPT_ROWS=0 (a forward per prompt chunk, then the decode step); the counts a
// case checks (tokens after a round, rounds, steps, chunks, where the seconds went) follow the
// pass, so a wrongly switched mode fails:
//   - four different requests at once (text sampled, an image, an audio clip, text with top-k),
//     of different lengths, one prefilled in small chunks between the others' decode steps;
//     the step really ran them together (max_rows 4, rows stepped counted);
//   - a request cancelled mid-batch: its tokens so far are a prefix of its alone run, it
//     leaves at once, and its slot (KV state) is reused by the next request without making a
//     new one; a full batch refuses a submit (id 0); g4cu_batch_get_slot's view of the slots
//     (ids, phases, prompt and generated tokens counted by the rounds run) along the way;
//   - sequences of very different lengths (a long prompt with 2 new tokens beside a short one
//     with many), slot reuse across them, and raw ids (g4cu_batch_submit_ids vs
//     g4cu_generate_ids);
//   - the round's prefill budget: prompts cut to it, several prompts in one round, one that does
//     not fit waiting while a younger one that fits goes in (own forwards), each request's
//     tokens as alone; G4_BATCH_PREFILL_ONE=1 (the budget one chunk: one chunk a round; with
//     prompt rows it does not apply); a long prompt over several rounds beside a decoding
//     request that gets a token in every one; what the default falls back to (the earlier
//     rounds: one slot, G4_BATCH_ROWS=0);
//     g4cu_batch_reserve (the slots' states made ahead: none made by the requests);
//     the timing split (g4cu_batch_get_times): exact counts, finite non-negative seconds that
//     grow with the work;
//   - the error contract: bad requests take no slot, unknown ids are user errors;
//   - a hostile caller: a prompt past the context, ids never submitted (poll's *out zeroed), prompt
//     tokens past the vocabulary (ends that request only, in a step; the batch stays usable);
//   - a conversation (messages) as g4cu_generate runs it;
//     each field that needs the host-side pick (logprobs, penalties, logit_bias, min_p, JSON,
//     tools) refused by name, taking no slot, and refused by g4cu_batch_accepts too.
#include <g4cu.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

static g4cu_model *model;
static const char *fix;
// The pass (main): prompts as rows of the decode step (the default), or G4_BATCH_PROMPT_ROWS=0.
static int rows_on;

typedef struct {
    int n_tokens;
    int32_t tokens[512];
    char text[4096];
    char reason[32];
} outcome;

static void keep(const g4cu_result *r, outcome *o) {
    memset(o, 0, sizeof *o);
    o->n_tokens = r->n_tokens < 512 ? r->n_tokens : 512;
    memcpy(o->tokens, r->tokens, sizeof(int32_t) * (size_t)o->n_tokens);
    if (r->text) snprintf(o->text, sizeof o->text, "%s", r->text);
    snprintf(o->reason, sizeof o->reason, "%s", r->stop_reason ? r->stop_reason : "");
}

// rq alone on a fresh state.
// The outcome of rq run alone on a fresh state of m: g4cu_generate, or with ids (n of them)
// g4cu_generate_ids with rq as its options. 0 when it fails.
static int alone_on(g4cu_model *m, const g4cu_request *rq, const int32_t *ids, int n, outcome *o) {
    memset(o, 0, sizeof *o); // (compared even when it fails: no garbage in the report)
    g4cu_state *s;
    g4cu_result r;
    if (g4cu_state_new(m, &s)) return 0;
    int ok = (ids ? g4cu_generate_ids(s, ids, n, rq, &r) : g4cu_generate(s, rq, &r)) == G4CU_OK;
    if (!ok) fprintf(stderr, "alone: %s\n", g4cu_last_error());
    if (ok) keep(&r, o);
    g4cu_result_free(&r);
    g4cu_state_free(s);
    return ok;
}

static int alone(const g4cu_request *rq, outcome *o) {
    return alone_on(model, rq, NULL, 0, o);
}

static void same(const char *name, const outcome *got, const outcome *want) {
    CHECK_MSG(got->n_tokens == want->n_tokens, "%s: %d tokens in the batch, %d alone", name,
              got->n_tokens, want->n_tokens);
    int first = -1;
    for (int i = 0; i < got->n_tokens && i < want->n_tokens && first < 0; i++)
        if (got->tokens[i] != want->tokens[i]) first = i;
    CHECK_MSG(first < 0, "%s: token %d differs (%d in the batch, %d alone)", name, first,
              first >= 0 ? got->tokens[first] : 0, first >= 0 ? want->tokens[first] : 0);
    CHECK_MSG(!strcmp(got->text, want->text), "%s: text '%s' in the batch, '%s' alone", name,
              got->text, want->text);
    CHECK_MSG(!strcmp(got->reason, want->reason), "%s: stop '%s' in the batch, '%s' alone", name,
              got->reason, want->reason);
}

typedef struct {
    char buf[4096];
    size_t len;
} sink;

static int collect(void *user, const char *text, size_t len) {
    sink *k = user;
    if (k->len + len < sizeof k->buf) memcpy(k->buf + k->len, text, len), k->len += len;
    return 0;
}

// Steps b until nothing runs (bounded); returns the steps taken.
static int run_all(g4cu_batch *b) {
    int running = 1, steps = 0;
    while (running && steps < 10000) {
        CHECK_MSG(g4cu_batch_step(b, &running) == G4CU_OK, "%s", g4cu_last_error());
        steps++;
    }
    return steps;
}

static void poll_done(g4cu_batch *b, int64_t id, outcome *o, const char *name) {
    memset(o, 0, sizeof *o);
    g4cu_result r = {0}; // (a failed poll may leave it as it was)
    int done = 0;
    CHECK_MSG(g4cu_batch_poll(b, id, &r, &done) == G4CU_OK, "%s: %s", name, g4cu_last_error());
    CHECK_MSG(done, "%s: not done after the batch ran out", name);
    if (done) keep(&r, o);
    g4cu_result_free(&r);
}

// HF's greedy ids of the fixture's media case `name` (generate_cases.jsonl: what g4cu_vqa /
// g4cu_transcribe give alone on this package, test_api checks) as an outcome, its prompt text
// and file in *text, *file.
static int hf_case(const cf_lines *l, const char *name, outcome *o, const char **text,
                   char **file, int *max_new) {
    for (int c = 0; c < l->n; c++) {
        const cJSON *x = l->line[c];
        const char *nm = cf_str(x, "name"), *pk = cf_str(x, "package");
        if (!nm || !pk || strcmp(nm, name) || strcmp(pk, "mobius-tiny-f16")) continue;
        int n, *ids = cf_ints(x, "ids", &n);
        memset(o, 0, sizeof *o);
        o->n_tokens = n < 512 ? n : 512;
        for (int i = 0; i < o->n_tokens; i++) o->tokens[i] = ids[i];
        free(ids);
        *max_new = cf_int(x, "max_new");
        snprintf(o->reason, sizeof o->reason, "%s", n == *max_new ? "max_new" : "eos");
        *text = cf_str(x, "text");
        *file = g4_sprintf("%s/%s", fix, cf_str(x, "file"));
        return 1;
    }
    return 0;
}

static void test_four_kinds(void) {
    char *cases = g4_sprintf("%s/chat/generate_cases.jsonl", fix);
    cf_lines l = cf_read(cases);
    outcome want[4] = {{0}}, got[4] = {{0}};
    char *img = NULL, *wav = NULL;
    int img_new = 0, wav_new = 0;
    const char *img_text = NULL, *wav_text = NULL;
    CHECK(hf_case(&l, "vqa_square", &want[1], &img_text, &img, &img_new));
    CHECK(hf_case(&l, "asr_tone", &want[2], &wav_text, &wav, &wav_new));
    if (!img || !wav) return;
    g4cu_media mi = {.kind = G4CU_IMAGE_FILE, .path = img};
    g4cu_media ma = {.kind = G4CU_AUDIO_FILE, .path = wav};
    g4cu_request rq[4];
    for (int i = 0; i < 4; i++) g4cu_request_default(&rq[i]);
    rq[0].text = "Tell me a story about a cat.";
    rq[0].temperature = 0.9f, rq[0].seed = 7, rq[0].max_tokens = 24, rq[0].ignore_eos = 1;
    rq[1].text = img_text, rq[1].media = &mi, rq[1].n_media = 1, rq[1].max_tokens = img_new;
    rq[2].text = wav_text, rq[2].media = &ma, rq[2].n_media = 1, rq[2].max_tokens = wav_new;
    rq[2].prefill_chunk = 16; // its prompt in chunks between the others' decode steps
    rq[3].text = "Name three colours.";
    rq[3].temperature = 0.7f, rq[3].top_k = 5, rq[3].top_p = 0.9f, rq[3].seed = 3;
    rq[3].max_tokens = 12, rq[3].ignore_eos = 1;
    // the text requests alone (the media ones: HF's ids above, no second tower run)
    CHECK(alone(&rq[0], &want[0]) && alone(&rq[3], &want[3]));
    for (int i = 0; i < 4; i++) CHECK_INT(want[i].n_tokens, rq[i].max_tokens);

    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 4;
    g4cu_batch *b;
    CHECK_MSG(g4cu_batch_new(model, &bp, &b) == G4CU_OK, "%s", g4cu_last_error());
    sink k = {0};
    rq[0].on_text = collect, rq[0].user = &k;
    int64_t id[4] = {0};
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(g4cu_batch_submit(b, &rq[i], &id[i]) == G4CU_OK, "%d: %s", i,
                  g4cu_last_error());
        CHECK(id[i] > 0);
    }
    run_all(b);
    g4cu_batch_info info;
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.max_rows, 4);
    CHECK_INT(info.states, 4);
    // every generated token but each request's first (its prefill's) went through a decode row
    long rows = 0;
    for (int i = 0; i < 4; i++) rows += rq[i].max_tokens - 1;
    CHECK_INT(info.rows_stepped, rows);
    const char *names[4] = {"text sampled", "image", "audio (chunked prefill)", "text top-k"};
    for (int i = 0; i < 4; i++) {
        poll_done(b, id[i], &got[i], names[i]);
        if (i == 1 || i == 2) { // HF's ids: no text to compare
            snprintf(got[i].text, sizeof got[i].text, "%s", "");
            want[i].text[0] = 0;
        }
        same(names[i], &got[i], &want[i]);
    }
    CHECK_MSG(k.len == strlen(got[0].text) && !memcmp(k.buf, got[0].text, k.len),
              "the streamed pieces of request 0 do not add up to its text");
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.in_use, 0);
    g4cu_batch_free(b);
    cf_free(&l);
    free(cases);
    free(img);
    free(wav);
}

static void test_cancel_and_reuse(void) {
    g4cu_request a, c, d;
    g4cu_request_default(&a);
    a.text = "Count to one hundred.";
    a.max_tokens = 20, a.ignore_eos = 1;
    c = a;
    c.text = "List the planets.";
    c.temperature = 1.0f, c.seed = 11;
    d = a;
    d.text = "Why is the sky blue?";
    d.max_tokens = 8;
    outcome wa = {0}, wc = {0}, wd = {0}, ga = {0}, gc = {0}, gd = {0};
    CHECK(alone(&a, &wa) && alone(&c, &wc) && alone(&d, &wd));
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 2;
    g4cu_batch *b;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    int64_t ia = 0, ic = 0, id = 0, full = -1;
    CHECK(g4cu_batch_submit(b, &a, &ia) == G4CU_OK && ia > 0);
    CHECK(g4cu_batch_submit(b, &c, &ic) == G4CU_OK && ic > 0);
    CHECK(g4cu_batch_submit(b, &d, &full) == G4CU_OK);
    CHECK_INT(full, 0); // both slots taken
    int running = 0;
    for (int i = 0; i < 6; i++) CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
    CHECK_INT(running, 2);
    // the slots as g4cu_batch_get_slot sees them: a (slot 0) and c decoding, their prompts in
    // (both in step 1: the default prefill budget of 512 tokens takes both short prompts in one
    // round). With prompts as rows (the default) both prompts are rows of step 1, whose pick is
    // each one's first token, and each later step gives one more: 1 + 5 = 6 each. With
    // G4_BATCH_PROMPT_ROWS=0 a round's prefill chunk gives a request's first token and the same
    // round's decode step its second, each later round one more: 2 + 5 = 7 each.
    g4cu_batch_slot_info si[2];
    for (int k = 0; k < 2; k++) g4cu_batch_get_slot(b, k, &si[k]);
    CHECK_MSG(si[0].id == ia && si[1].id == ic, "slots hold ids %lld, %lld (want %lld, %lld)",
              (long long)si[0].id, (long long)si[1].id, (long long)ia, (long long)ic);
    for (int k = 0; k < 2; k++)
        CHECK_MSG(si[k].phase == G4CU_SLOT_DECODE && si[k].n_prompt > 0 &&
                      si[k].n_prefilled == si[k].n_prompt &&
                      si[k].n_generated == (rows_on ? 6 : 7) &&
                      si[k].n_ctx >= si[k].n_prompt + si[k].n_generated,
                  "slot %d: phase %d, prompt %d, prefilled %d, generated %d, kv rows %d", k,
                  (int)si[k].phase, si[k].n_prompt, si[k].n_prefilled, si[k].n_generated,
                  si[k].n_ctx);
    CHECK(g4cu_batch_cancel(b, ia) == G4CU_OK);
    g4cu_batch_get_slot(b, 0, &si[0]);
    CHECK_MSG(si[0].phase == G4CU_SLOT_DONE && si[0].id == ia, "slot 0 after the cancel: phase %d",
              (int)si[0].phase);
    g4cu_batch_get_slot(b, 7, &si[1]); // outside the batch: all zero
    CHECK(si[1].id == 0 && si[1].phase == G4CU_SLOT_FREE && si[1].n_ctx == 0);
    CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
    CHECK_INT(running, 1); // a left at once
    poll_done(b, ia, &ga, "cancelled");
    g4cu_batch_get_slot(b, 0, &si[0]);
    CHECK_MSG(si[0].phase == G4CU_SLOT_FREE && si[0].id == 0 && si[0].n_ctx > 0,
              "slot 0 once polled: phase %d, id %lld, kv rows %d (kept for the next request)",
              (int)si[0].phase, (long long)si[0].id, si[0].n_ctx);
    CHECK(!strcmp(ga.reason, "cancelled"));
    CHECK_MSG(ga.n_tokens >= 2 && ga.n_tokens < a.max_tokens, "%d tokens before the cancel",
              ga.n_tokens);
    CHECK_MSG(!memcmp(ga.tokens, wa.tokens, sizeof(int32_t) * (size_t)ga.n_tokens),
              "the cancelled request's tokens are not a prefix of its alone run");
    // its slot takes d, reusing its state
    CHECK(g4cu_batch_submit(b, &d, &id) == G4CU_OK && id > 0);
    g4cu_batch_info now;
    g4cu_batch_get_info(b, &now);
    CHECK(now.running == 2 && now.in_use == 2); // c decoding, d about to prefill
    run_all(b);
    poll_done(b, ic, &gc, "beside a cancel");
    poll_done(b, id, &gd, "in a reused slot");
    same("beside a cancel", &gc, &wc);
    same("in a reused slot", &gd, &wd);
    g4cu_batch_info info;
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.states, 2);
    // errors: unknown and already-polled ids, a bad request (no slot taken)
    g4cu_result r;
    int done = 1;
    CHECK_INT(g4cu_batch_poll(b, ia, &r, &done), G4CU_EUSER);
    CHECK_INT(done, 0);
    CHECK_MSG(strstr(g4cu_last_error(), "not in the batch"), "%s", g4cu_last_error());
    CHECK_INT(g4cu_batch_cancel(b, 12345), G4CU_EUSER);
    g4cu_request bad = a;
    bad.max_tokens = 0;
    int64_t ib = 7;
    CHECK_INT(g4cu_batch_submit(b, &bad, &ib), G4CU_EUSER);
    CHECK_INT(ib, 0);
    bad = a;
    bad.text = NULL;
    CHECK_INT(g4cu_batch_submit(b, &bad, &ib), G4CU_EUSER);
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.in_use, 0);
    CHECK_INT(g4cu_batch_step(b, &running), G4CU_OK);
    CHECK_INT(running, 0);
    // freed with requests still running and one finished, never polled (ASan: nothing leaks)
    CHECK(g4cu_batch_submit(b, &a, &ia) == G4CU_OK && ia > 0);
    CHECK(g4cu_batch_submit(b, &d, &id) == G4CU_OK && id > 0);
    for (int i = 0; i < 3; i++) CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
    CHECK(g4cu_batch_cancel(b, id) == G4CU_OK);
    g4cu_batch_free(b);
    g4cu_batch_params bad_p = bp;
    bad_p.slots = 0;
    g4cu_batch *nb = (g4cu_batch *)&bad_p;
    CHECK_INT(g4cu_batch_new(model, &bad_p, &nb), G4CU_EUSER);
    CHECK(nb == NULL);
    CHECK_MSG(strstr(g4cu_last_error(), "batch of 0 slots: expected 1..4096"), "%s",
              g4cu_last_error());
}

static void test_lengths(void) {
    // a long prompt (~190 tokens: 6 prefill chunks of 32; as rows, the request's chunk size does
    // not apply: one step) with 2 new tokens beside a short one with 30
    char *longtext = g4_malloc(8192);
    longtext[0] = 0;
    for (int i = 0; i < 20; i++) strcat(longtext, "the quick brown fox jumps over the lazy dog ");
    g4cu_request lo, sh, again;
    g4cu_request_default(&lo);
    lo.text = longtext, lo.max_tokens = 2, lo.ignore_eos = 1, lo.prefill_chunk = 32;
    g4cu_request_default(&sh);
    sh.text = "Hi", sh.max_tokens = 30, sh.ignore_eos = 1;
    again = sh;
    again.text = "Hello there", again.max_tokens = 5, again.temperature = 0.5f, again.seed = 99;
    outcome wl = {0}, ws = {0}, wa = {0}, gl = {0}, gs = {0}, ga = {0};
    CHECK(alone(&lo, &wl) && alone(&sh, &ws) && alone(&again, &wa));
    g4cu_batch *b;
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 2;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    int64_t il = 0, is = 0, ia = 0;
    CHECK(g4cu_batch_submit(b, &sh, &is) == G4CU_OK && is > 0);
    CHECK(g4cu_batch_submit(b, &lo, &il) == G4CU_OK && il > 0);
    // the short one decodes while the long prompt is prefilled (chunk by chunk); then the long one
    // ends after 2 tokens, and its slot takes another request while the short one still runs
    int running = 1, steps = 0, submitted = 0;
    while (running && steps++ < 1000) {
        CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
        g4cu_result r;
        int done = 0;
        if (il && g4cu_batch_poll(b, il, &r, &done) == G4CU_OK && done) {
            keep(&r, &gl);
            g4cu_result_free(&r);
            il = 0;
            CHECK(g4cu_batch_submit(b, &again, &ia) == G4CU_OK && ia > 0);
            submitted = 1;
            running = 1;
        }
    }
    CHECK(submitted);
    poll_done(b, is, &gs, "short prompt, long answer");
    poll_done(b, ia, &ga, "after the long prompt");
    same("long prompt, short answer", &gl, &wl);
    same("short prompt, long answer", &gs, &ws);
    same("after the long prompt", &ga, &wa);
    g4cu_batch_free(b);

    // raw ids: g4cu_batch_submit_ids as g4cu_generate_ids
    int32_t ids1[] = {2, 5, 17, 40, 41, 42}, ids2[] = {2, 9};
    g4cu_request o1, o2;
    g4cu_request_default(&o1);
    o1.max_tokens = 7, o1.ignore_eos = 1;
    o2 = o1;
    o2.max_tokens = 13, o2.temperature = 0.8f, o2.seed = 5;
    outcome w1 = {0}, w2 = {0}, g1 = {0}, g2 = {0};
    CHECK(alone_on(model, &o1, ids1, 6, &w1));
    CHECK(alone_on(model, &o2, ids2, 2, &w2));
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    int64_t j1 = 0, j2 = 0;
    CHECK(g4cu_batch_submit_ids(b, ids1, 6, &o1, &j1) == G4CU_OK && j1 > 0);
    CHECK(g4cu_batch_submit_ids(b, ids2, 2, &o2, &j2) == G4CU_OK && j2 > 0);
    run_all(b);
    poll_done(b, j1, &g1, "ids 1");
    poll_done(b, j2, &g2, "ids 2");
    same("ids 1", &g1, &w1);
    same("ids 2", &g2, &w2);
    int32_t bad_ids[] = {2, 1 << 30};
    int64_t jb = 0;
    CHECK(g4cu_batch_submit_ids(b, bad_ids, 2, &o1, &jb) == G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "outside the vocabulary"), "%s", g4cu_last_error());
    CHECK_INT(jb, 0);
    g4cu_batch_free(b);

    // one slot: the short request, then the long one in the same state, which grows with
    // headroom (to a multiple of 256 rows, engine/batch.h) and still gives the tokens alone
    bp.slots = 1;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    outcome g3 = {0}, g4 = {0};
    CHECK(g4cu_batch_submit(b, &sh, &is) == G4CU_OK && is > 0);
    g4cu_batch_slot_info si;
    g4cu_batch_get_slot(b, 0, &si);
    const int first_rows = si.n_ctx;
    run_all(b);
    poll_done(b, is, &g3, "one slot: short");
    CHECK(g4cu_batch_submit(b, &lo, &il) == G4CU_OK && il > 0);
    g4cu_batch_get_slot(b, 0, &si);
    CHECK_MSG(first_rows < si.n_prompt + 2 && si.n_ctx % 256 == 0 && si.n_ctx >= si.n_prompt + 2,
              "one slot: %d KV rows for the short request, %d for the long one's %d + 2 (want a "
              "multiple of 256)",
              first_rows, si.n_ctx, si.n_prompt);
    run_all(b);
    poll_done(b, il, &g4, "one slot: long after short");
    same("one slot: short", &g3, &ws);
    same("one slot: long after short (grown)", &g4, &wl);
    g4cu_batch_info bi;
    g4cu_batch_get_info(b, &bi);
    CHECK_INT(bi.states, 1);
    g4cu_batch_free(b);
    free(longtext);
}

static void test_conversation_and_refusals(void) {
    // (text only: a tower run costs seconds here, and the media's order per message is the
    // loader g4cu_generate shares, which test_api checks)
    const g4cu_message msgs[3] = {
        {.role = "user", .text = "Hello."},
        {.role = "assistant", .text = "Hi! How can I help?"},
        {.role = "user", .text = "Name a colour."},
    };
    g4cu_request cv;
    g4cu_request_default(&cv);
    cv.system = "Be brief.";
    cv.messages = msgs, cv.n_messages = 3;
    cv.max_tokens = 6, cv.ignore_eos = 1, cv.temperature = 0.8f, cv.seed = 21;
    outcome want = {0}, got = {0};
    CHECK(alone(&cv, &want));
    CHECK_INT(want.n_tokens, 6);
    g4cu_batch *b;
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 2;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    int64_t id = 0;
    CHECK_MSG(g4cu_batch_submit(b, &cv, &id) == G4CU_OK && id > 0, "%s", g4cu_last_error());
    run_all(b);
    poll_done(b, id, &got, "conversation");
    same("conversation", &got, &want);
    g4cu_request bad = cv;
    bad.text = "also a text";
    CHECK_INT(g4cu_batch_submit(b, &bad, &id), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "text must be NULL"), "%s", g4cu_last_error());

    // the host-side pick's fields: refused by name, no slot taken
    const int32_t bias_id = 5;
    const float bias = 2.0f;
    const char *fields[9] = {"logprobs",   "repetition_penalty", "presence_penalty",
                             "frequency_penalty", "logit_bias", "min_p",
                             "json_schema", "json", "tools_json"};
    for (int f = 0; f < 9; f++) {
        g4cu_request rq;
        g4cu_request_default(&rq);
        rq.text = "Hi", rq.max_tokens = 3;
        switch (f) {
        case 0: rq.logprobs = 1; break;
        case 1: rq.repetition_penalty = 1.3f; break;
        case 2: rq.presence_penalty = 0.5f; break;
        case 3: rq.frequency_penalty = 0.5f; break;
        case 4: rq.logit_bias_ids = &bias_id, rq.logit_bias = &bias, rq.n_logit_bias = 1; break;
        case 5: rq.min_p = 0.1f; break;
        case 6: rq.json = G4CU_JSON_SCHEMA, rq.json_schema = "{\"type\":\"object\"}"; break;
        case 7: rq.json = G4CU_JSON_OBJECT; break;
        case 8: rq.tools_json = "[]"; break;
        }
        CHECK_MSG(!g4cu_batch_accepts(&rq), "g4cu_batch_accepts takes %s", fields[f]);
        id = 7;
        CHECK_INT(g4cu_batch_submit(b, &rq, &id), G4CU_EUSER);
        CHECK_INT(id, 0);
        char want_msg[96];
        snprintf(want_msg, sizeof want_msg, "g4cu_batch_submit: %s is not batched yet",
                 fields[f]);
        CHECK_MSG(strstr(g4cu_last_error(), want_msg), "%s: %s", fields[f], g4cu_last_error());
    }
    g4cu_request lp;
    g4cu_request_default(&lp);
    lp.logprobs = 1, lp.max_tokens = 3;
    int32_t ids[] = {2, 9};
    CHECK_INT(g4cu_batch_submit_ids(b, ids, 2, &lp, &id), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "g4cu_batch_submit_ids: logprobs is not batched yet"),
              "%s", g4cu_last_error());
    lp.logprobs = 0, lp.repetition_penalty = 1.0f; // 1: off, so batched
    CHECK(g4cu_batch_accepts(&lp) && !g4cu_batch_accepts(NULL));
    CHECK_MSG(g4cu_batch_submit_ids(b, ids, 2, &lp, &id) == G4CU_OK && id > 0, "%s",
              g4cu_last_error());
    run_all(b);
    poll_done(b, id, &got, "repetition_penalty 1");
    CHECK_INT(got.n_tokens > 0, 1);
    g4cu_batch_info info;
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.in_use, 0);
    g4cu_batch_free(b);
}

// The batch's timing split (g4cu_batch_get_times) at a given state: its counts checked exactly,
// its seconds finite and non-negative.
static g4cu_batch_times times_now(g4cu_batch *b) {
    g4cu_batch_times t;
    g4cu_batch_get_times(b, &t);
    const double s[3] = {t.prefill_s, t.decode_s, t.accept_s};
    for (int i = 0; i < 3; i++)
        CHECK_MSG(isfinite(s[i]) && s[i] >= 0, "batch times: seconds %d is %g", i, s[i]);
    return t;
}

// The round's prefill budget (g4cu_batch_set_prefill_tokens): prompts of 10, 7 and 1 ids under
// a budget of 8 tokens, on states of 64 rows made ahead by g4cu_batch_reserve. Each request's
// tokens are still those it gets alone (its prompt in pieces of 8 + 2 here, in one alone: the
// CPU reference's rows do not depend on the chunking). The times' counts are exact; the rounds
// follow the pass:
//  - prompts as rows (the default): a round is ONE step over the decode rows and the prompt
//    rows the budget takes, oldest first, each as many as fit, the last cut to what is left.
//    Step 1 takes 8 of the 10 (no row samples); step 2 its last 2 (its last row samples its
//    first token) and 6 of the 7; step 3 a's decode row, the 7's last row and the 1 (each
//    samples). One step a round, chunks 1, 3, 5, tokens 8, 16, 18; tokens generated after each
//    round 0/0/0, 1/0/0, 2/1/1. Then a (6 new) ends in round 7, b (7) in round 9, c (8) in
//    round 10: 10 rounds, 10 steps. No prefill seconds (the prompt rows are in the step's).
//  - G4_BATCH_PROMPT_ROWS=0: round 1: the oldest (10) gets a chunk cut to 8. Round 2: its last
//    2, then the 7 does not fit in the 6 left and waits (never cut to fill the budget), the 1
//    after it does; the decode step gives a and c their second token. Round 3: the 7, whole.
//    Chunks 1, 3, 4, tokens 8, 11, 18, decode steps 0, 1, 2; generated 0/0/0, 2/0/2, 3/2/3.
//    Then a ends in round 6, b and c in round 8: 8 rounds, 7 steps. Every round of the three
//    ran a chunk (prefill seconds grow); no decode step before round 2.
// Then G4_BATCH_PREFILL_ONE=1 (read when a batch is made): without prompt rows the budget is the
// oldest's one chunk, so the same prompts go in one chunk a round (8, the 2 left, the 7, the 1);
// with prompt rows it does not apply (the rounds above). Still each as alone.
static void test_prefill_budget(void) {
    int32_t pa[10] = {2, 5, 17, 40, 41, 42, 43, 44, 45, 46}, pb[7] = {2, 9, 11, 13, 15, 17, 19},
            pc[1] = {2};
    const int32_t *ids[3] = {pa, pb, pc};
    const int n[3] = {10, 7, 1};
    g4cu_request o[3];
    for (int i = 0; i < 3; i++) {
        g4cu_request_default(&o[i]);
        o[i].max_tokens = 6 + i, o[i].ignore_eos = 1;
    }
    o[1].temperature = 0.8f, o[1].seed = 4;
    outcome want[3] = {{0}}, got[3] = {{0}};
    for (int i = 0; i < 3; i++) CHECK(alone_on(model, &o[i], ids[i], n[i], &want[i]));
    g4cu_batch *b;
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 3;
    // g4cu_batch_reserve: needs n_ctx (else each state is sized by its request)
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    CHECK_INT(g4cu_batch_reserve(b), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "ahead needs n_ctx"), "%s", g4cu_last_error());
    CHECK_INT(g4cu_batch_reserve(NULL), G4CU_EUSER);
    g4cu_batch_free(b);
    // with n_ctx, every slot's state is made now and the requests below make none
    bp.n_ctx = 64;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    CHECK_MSG(g4cu_batch_reserve(b) == G4CU_OK, "%s", g4cu_last_error());
    g4cu_batch_info info;
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.states, 3);
    g4cu_batch_times t = times_now(b);
    CHECK(t.rounds == 0 && t.steps == 0 && t.prefill_chunks == 0 && t.prefill_tokens == 0 &&
          t.prefill_s == 0 && t.decode_s == 0 && t.accept_s == 0);
    CHECK_INT(g4cu_batch_set_prefill_tokens(b, -1), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "batch prefill budget of -1 tokens a round: expected >= 1"),
              "%s", g4cu_last_error());
    CHECK_INT(g4cu_batch_set_prefill_tokens(NULL, 8), G4CU_EUSER);
    CHECK_INT(g4cu_batch_set_prefill_tokens(b, 8), G4CU_OK);
    int64_t id[3] = {0};
    for (int i = 0; i < 3; i++)
        CHECK_MSG(g4cu_batch_submit_ids(b, ids[i], n[i], &o[i], &id[i]) == G4CU_OK && id[i] > 0,
                  "%d: %s", i, g4cu_last_error());
    // after each round: the prompt rows each slot has prefilled, the tokens it has generated,
    // the counts; then the rounds and steps at the end ([1]: prompts as rows, [0]: not)
    const int after_m[2][3][3] = {{{8, 0, 0}, {10, 0, 1}, {10, 7, 1}},
                                  {{8, 0, 0}, {10, 6, 0}, {10, 7, 1}}};
    const int gen_m[2][3][3] = {{{0, 0, 0}, {2, 0, 2}, {3, 2, 3}},
                                {{0, 0, 0}, {1, 0, 0}, {2, 1, 1}}};
    const long chunks_m[2][3] = {{1, 3, 4}, {1, 3, 5}}, tokens_m[2][3] = {{8, 11, 18}, {8, 16, 18}},
               steps_m[2][3] = {{0, 1, 2}, {1, 2, 3}};
    const long end_rounds = rows_on ? 10 : 8, end_steps = rows_on ? 10 : 7,
               end_chunks = rows_on ? 5 : 4;
    const char *how = rows_on ? "prompt rows" : "own forwards";
    int running = 0;
    for (int r = 0; r < 3; r++) {
        CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
        for (int k = 0; k < 3; k++) {
            g4cu_batch_slot_info si;
            g4cu_batch_get_slot(b, k, &si);
            CHECK_MSG(si.n_prefilled == after_m[rows_on][r][k] && si.n_prompt == n[k] &&
                          si.n_generated == gen_m[rows_on][r][k],
                      "%s, round %d, slot %d: %d of %d prompt rows prefilled, %d generated; want "
                      "%d of %d, %d",
                      how, r + 1, k, si.n_prefilled, si.n_prompt, si.n_generated,
                      after_m[rows_on][r][k], n[k], gen_m[rows_on][r][k]);
        }
        const g4cu_batch_times p = t;
        t = times_now(b);
        CHECK_MSG(t.rounds == r + 1 && t.steps == steps_m[rows_on][r] &&
                      t.prefill_chunks == chunks_m[rows_on][r] &&
                      t.prefill_tokens == tokens_m[rows_on][r],
                  "%s, round %d: %ld rounds, %ld steps, %ld chunks, %ld tokens; want %d, %ld, "
                  "%ld, %ld",
                  how, r + 1, t.rounds, t.steps, t.prefill_chunks, t.prefill_tokens, r + 1,
                  steps_m[rows_on][r], chunks_m[rows_on][r], tokens_m[rows_on][r]);
        // prompt rows: every round is a step (its seconds grow), no prefill forward; else every
        // round ran a chunk (its seconds grow) and a decode step from round 2 on
        if (rows_on)
            CHECK_MSG(t.prefill_s == 0 && t.decode_s > p.decode_s && t.accept_s >= p.accept_s,
                      "prompt rows, round %d: times went from %g/%g/%g to %g/%g/%g", r + 1,
                      p.prefill_s, p.decode_s, p.accept_s, t.prefill_s, t.decode_s, t.accept_s);
        else
            CHECK_MSG(
                t.prefill_s > p.prefill_s && t.decode_s >= p.decode_s && t.accept_s >= p.accept_s &&
                    (r > 0 || (t.decode_s == 0 && t.accept_s == 0)) && (r != 1 || t.decode_s > 0),
                "own forwards, round %d: times went from %g/%g/%g to %g/%g/%g", r + 1, p.prefill_s,
                p.decode_s, p.accept_s, t.prefill_s, t.decode_s, t.accept_s);
    }
    const int steps_run = 3 + run_all(b);
    for (int i = 0; i < 3; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s, budget 8, prompt of %d", how, n[i]);
        poll_done(b, id[i], &got[i], name);
        same(name, &got[i], &want[i]);
    }
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.states, 3);
    t = times_now(b);
    CHECK_MSG(steps_run == end_rounds && t.rounds == end_rounds && t.steps == end_steps &&
                  info.steps == end_steps && t.prefill_chunks == end_chunks &&
                  t.prefill_tokens == 18,
              "%s at the end: %ld rounds (%d steps called), %ld decode steps (info %ld), %ld "
              "chunks, %ld tokens; want %ld rounds, %ld steps, %ld chunks, 18 tokens",
              how, t.rounds, steps_run, t.steps, info.steps, t.prefill_chunks, t.prefill_tokens,
              end_rounds, end_steps, end_chunks);
    printf("prefill budget (%s): %ld rounds, %ld decode steps, prefill %.6f s decode %.6f s "
           "accept %.6f s\n",
           how, t.rounds, t.steps, t.prefill_s, t.decode_s, t.accept_s);
    g4cu_batch_get_times(NULL, &t); // zeroed
    CHECK(t.rounds == 0 && t.prefill_s == 0);
    g4cu_batch_get_times(b, NULL); // nothing
    g4cu_batch_free(b);

    setenv("G4_BATCH_PREFILL_ONE", "1", 1);
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    unsetenv("G4_BATCH_PREFILL_ONE"); // (main unset it)
    CHECK_INT(g4cu_batch_set_prefill_tokens(b, 8), G4CU_OK);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(g4cu_batch_submit_ids(b, ids[i], n[i], &o[i], &id[i]) == G4CU_OK && id[i] > 0,
                  "one a round, %d: %s", i, g4cu_last_error());
    const int after_one[2][4][3] = {{{8, 0, 0}, {10, 0, 0}, {10, 7, 0}, {10, 7, 1}},
                                    {{8, 0, 0}, {10, 6, 0}, {10, 7, 1}, {10, 7, 1}}};
    for (int r = 0; r < 4; r++) {
        CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
        for (int k = 0; k < 3; k++) {
            g4cu_batch_slot_info si;
            g4cu_batch_get_slot(b, k, &si);
            CHECK_MSG(si.n_prefilled == after_one[rows_on][r][k],
                      "%s, one a round: round %d, slot %d: %d prompt rows prefilled, want %d", how,
                      r + 1, k, si.n_prefilled, after_one[rows_on][r][k]);
        }
    }
    t = times_now(b);
    CHECK_MSG(t.rounds == 4 && t.prefill_chunks == (rows_on ? 5 : 4) && t.prefill_tokens == 18,
              "%s, one a round: %ld rounds, %ld chunks, %ld tokens; want 4, %d, 18", how, t.rounds,
              t.prefill_chunks, t.prefill_tokens, rows_on ? 5 : 4);
    run_all(b);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s, one a round, prompt of %d", how, n[i]);
        outcome g = {0};
        poll_done(b, id[i], &g, name);
        same(name, &g, &want[i]);
    }
    g4cu_batch_free(b);
}

// A prompt of 30 ids arriving while another request decodes, budget 8: the prompt goes in over
// 4 rounds (8 + 8 + 8 + 6: as rows of the step, longer than the step's rows; or chunks of its
// own forward cut to the budget) and the decoding request gets a token in every one of those
// rounds (it is not stalled). Prompts as rows: the decoding one has 1 + 1 tokens after the 2
// rounds before the long one comes, and the long one's first token comes with its last rows;
// G4_BATCH_PROMPT_ROWS=0: 2 + 1 (its prefill round gave two), and the long one's last chunk
// gives its first token and the step after it its second. Both as alone.
static void test_long_beside_decode(void) {
    const int32_t pc[1] = {2};
    int32_t lp[30];
    for (int i = 0; i < 30; i++) lp[i] = 2 + (i * 7) % 50;
    g4cu_request od, ol;
    g4cu_request_default(&od);
    od.max_tokens = 20, od.ignore_eos = 1;
    g4cu_request_default(&ol);
    ol.max_tokens = 5, ol.ignore_eos = 1, ol.temperature = 0.7f, ol.seed = 3;
    outcome wd = {0}, wl = {0}, gd = {0}, gl = {0};
    CHECK(alone_on(model, &od, pc, 1, &wd) && alone_on(model, &ol, lp, 30, &wl));
    g4cu_batch *b;
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 2;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    CHECK_INT(g4cu_batch_set_prefill_tokens(b, 8), G4CU_OK);
    int64_t jd = 0, jl = 0;
    int running = 0;
    CHECK(g4cu_batch_submit_ids(b, pc, 1, &od, &jd) == G4CU_OK && jd > 0);
    for (int r = 0; r < 2; r++) CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
    CHECK(g4cu_batch_submit_ids(b, lp, 30, &ol, &jl) == G4CU_OK && jl > 0);
    const int long_after[4] = {8, 16, 24, 30};
    const int d0 = rows_on ? 3 : 4, first = rows_on ? 1 : 2;
    const char *how = rows_on ? "prompt rows" : "own forwards";
    for (int r = 0; r < 4; r++) {
        CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
        g4cu_batch_slot_info sd, sl;
        g4cu_batch_get_slot(b, 0, &sd);
        g4cu_batch_get_slot(b, 1, &sl);
        CHECK_MSG(sd.n_generated == d0 + r && sl.n_prefilled == long_after[r] &&
                      sl.n_generated == (r == 3 ? first : 0),
                  "%s, long prompt, round %d: the decoding one has %d tokens (want %d), the long "
                  "one %d rows prefilled (want %d), %d tokens (want %d)",
                  how, r + 1, sd.n_generated, d0 + r, sl.n_prefilled, long_after[r], sl.n_generated,
                  r == 3 ? first : 0);
    }
    run_all(b);
    char nd[64], nl[64];
    snprintf(nd, sizeof nd, "%s: decoding beside a long prompt", how);
    snprintf(nl, sizeof nl, "%s: long prompt over 4 rounds", how);
    poll_done(b, jd, &gd, nd);
    poll_done(b, jl, &gl, nl);
    same(nd, &gd, &wd);
    same(nl, &gl, &wl);
    g4cu_batch_free(b);
}

// Where the default gives the earlier rounds (engine/batch.h): a batch of one slot, and the
// row-batched ops off (G4_BATCH_ROWS=0, read when the batch and its step's state are made).
// Two short prompts under the default budget with rows: one step, each prompt's last row
// samples its first token, no prefill seconds; without: the prefill chunks give each its first
// token, the decode step its second. One slot: the prompt's own forward, then the one-row step.
// Each as alone.
static void test_earlier_rounds(void) {
    const int32_t p1[3] = {2, 9, 40}, p2[2] = {2, 5};
    g4cu_request o;
    g4cu_request_default(&o);
    o.max_tokens = 4, o.ignore_eos = 1;
    outcome w1 = {0}, w2 = {0}, g = {0};
    CHECK(alone_on(model, &o, p1, 3, &w1) && alone_on(model, &o, p2, 2, &w2));
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    for (int c = 0; c < 3; c++) { // 0: rows as the pass has them, 1: G4_BATCH_ROWS=0, 2: one slot
        if (c == 1) setenv("G4_BATCH_ROWS", "0", 1);
        bp.slots = c == 2 ? 1 : 2;
        g4cu_batch *b;
        CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
        int64_t i1 = 0, i2 = 0;
        int running = 0;
        CHECK(g4cu_batch_submit_ids(b, p1, 3, &o, &i1) == G4CU_OK && i1 > 0);
        if (c < 2) CHECK(g4cu_batch_submit_ids(b, p2, 2, &o, &i2) == G4CU_OK && i2 > 0);
        CHECK(g4cu_batch_step(b, &running) == G4CU_OK);
        const int rows = rows_on && c == 0;
        g4cu_batch_times t;
        g4cu_batch_get_times(b, &t);
        for (int k = 0; k < (c < 2 ? 2 : 1); k++) {
            g4cu_batch_slot_info si;
            g4cu_batch_get_slot(b, k, &si);
            CHECK_MSG(si.n_generated == (rows ? 1 : 2) && si.n_prefilled == si.n_prompt,
                      "case %d (%s): slot %d has %d tokens after one round (want %d), %d of %d "
                      "prompt rows in",
                      c, rows ? "prompt rows" : "earlier rounds", k, si.n_generated, rows ? 1 : 2,
                      si.n_prefilled, si.n_prompt);
        }
        CHECK_MSG(t.steps == 1 && t.prefill_chunks == (c < 2 ? 2 : 1) &&
                      (rows ? t.prefill_s == 0 : t.prefill_s > 0),
                  "case %d: %ld steps, %ld chunks, prefill %g s after one round", c, t.steps,
                  t.prefill_chunks, t.prefill_s);
        run_all(b);
        if (c == 1) unsetenv("G4_BATCH_ROWS"); // (after the step state is made: main unset it)
        poll_done(b, i1, &g, "earlier rounds: 3 ids");
        same("earlier rounds: 3 ids", &g, &w1);
        if (c < 2) {
            poll_done(b, i2, &g, "earlier rounds: 2 ids");
            same("earlier rounds: 2 ids", &g, &w2);
        }
        g4cu_batch_free(b);
    }
}

// A hostile caller (or a package not made for the tokenizer, as on the GPU's gpu-tiny): a prompt
// longer than the context, ids never submitted, prompt tokens outside the model's vocabulary.
// Each is an error that takes no slot or ends only its own request; the batch stays usable
// and frees clean (ASan).
static void test_hostile(void) {
    g4cu_batch *b;
    g4cu_batch_params bp;
    g4cu_batch_params_default(&bp);
    bp.slots = 2;
    CHECK(g4cu_batch_new(model, &bp, &b) == G4CU_OK);
    // longer than the model's context (4096 on the tiny fixture): ~9.5 tokens a sentence
    char *longtext = g4_malloc(32768);
    longtext[0] = 0;
    for (int i = 0; i < 600; i++) strcat(longtext, "the quick brown fox jumps over the lazy dog ");
    g4cu_request lo;
    g4cu_request_default(&lo);
    lo.text = longtext, lo.max_tokens = 2;
    int64_t id = 7;
    CHECK_INT(g4cu_batch_submit(b, &lo, &id), G4CU_EUSER);
    CHECK_MSG(strstr(g4cu_last_error(), "longer than the model's context"), "%s",
              g4cu_last_error());
    CHECK_INT(id, 0);
    g4cu_batch_info info;
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.in_use, 0);
    // ids never submitted (0 is what a refused submit leaves): user errors, *out zeroed
    const int64_t unknown[3] = {0, -1, 999};
    for (int i = 0; i < 3; i++) {
        g4cu_result r;
        memset(&r, 0xab, sizeof r); // what an uninitialised result may hold
        int done = 1;
        CHECK_INT(g4cu_batch_poll(b, unknown[i], &r, &done), G4CU_EUSER);
        CHECK_INT(done, 0);
        const int zeroed = r.tokens == NULL && r.text == NULL && r.n_tokens == 0;
        CHECK_MSG(zeroed, "poll of unknown id %lld left *out unzeroed", (long long)unknown[i]);
        if (zeroed) g4cu_result_free(&r); // safe after a failed poll (garbage would crash here)
        CHECK_INT(g4cu_batch_cancel(b, unknown[i]), G4CU_EUSER);
    }
    {
        g4cu_result r;
        memset(&r, 0xab, sizeof r);
        int done = 1;
        CHECK_INT(g4cu_batch_poll(NULL, 1, &r, &done), G4CU_EUSER);
        CHECK(done == 0 && r.tokens == NULL && r.text == NULL);
    }
    g4cu_batch_free(b);
    free(longtext);

    // prompt tokens past the vocabulary, found only when the prefill runs inside a step: the
    // chat tokenizer (ids up to 1023) over tiny2 (256 rows), as a package of another
    // vocabulary does on the GPU. That request ends alone, its poll returns the error; a
    // request of in-vocabulary ids beside it runs as it does alone.
    g4cu_model *m2;
    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    mp.backend = "cpu";
    char *tok = g4_sprintf("%s/chat/chat_bpe.json", fix);
    char *pkg = g4_sprintf("%s/tiny2/package", fix);
    mp.tokenizer_path = tok;
    if (g4cu_model_load(pkg, &mp, &m2)) {
        CHECK_MSG(0, "%s", g4cu_last_error());
        free(tok), free(pkg);
        return;
    }
    CHECK_INT(g4cu_model_n_vocab(m2), 256);
    g4cu_request bad, good;
    g4cu_request_default(&bad);
    bad.text = "Why is the sky blue? Tell me everything.", bad.max_tokens = 4;
    g4cu_request_default(&good);
    good.max_tokens = 6, good.ignore_eos = 1;
    const int32_t ids[] = {2, 9, 40, 41};
    g4cu_result r;
    outcome want = {0}, got = {0};
    CHECK(alone_on(m2, &good, ids, 4, &want));
    CHECK(g4cu_batch_new(m2, &bp, &b) == G4CU_OK);
    int64_t ib = 0, ig = 0;
    CHECK_MSG(g4cu_batch_submit(b, &bad, &ib) == G4CU_OK && ib > 0, "%s", g4cu_last_error());
    CHECK(g4cu_batch_submit_ids(b, ids, 4, &good, &ig) == G4CU_OK && ig > 0);
    run_all(b);
    int done = 0;
    r = (g4cu_result){0};
    CHECK_INT(g4cu_batch_poll(b, ib, &r, &done), G4CU_EUSER);
    CHECK_INT(done, 1);
    CHECK_MSG(strstr(g4cu_last_error(), "outside the vocabulary [0, 256)"), "%s",
              g4cu_last_error());
    CHECK(r.tokens == NULL && r.n_tokens == 0);
    g4cu_result_free(&r);
    poll_done(b, ig, &got, "beside an out-of-vocabulary prompt");
    same("beside an out-of-vocabulary prompt", &got, &want);
    // both slots usable again; freed with a failed request never polled
    CHECK(g4cu_batch_submit(b, &bad, &ib) == G4CU_OK && ib > 0);
    CHECK(g4cu_batch_submit_ids(b, ids, 4, &good, &ig) == G4CU_OK && ig > 0);
    run_all(b);
    g4cu_batch_get_info(b, &info);
    CHECK_INT(info.in_use, 2);
    CHECK_INT(info.running, 0);
    g4cu_batch_free(b);
    g4cu_model_free(m2);
    free(tok);
    free(pkg);
}

int main(void) {
    fix = g4t_env("G4_FIXTURES");
    char *tok = g4_sprintf("%s/chat/chat_bpe.json", fix);
    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    // G4_BATCH_BACKEND=cuda: the same cases on the GPU (tools/gpu/run.sh stage batch_cuda; there
    // a batch may round differently from M = 1, so a difference is reported, not expected away)
    mp.backend = getenv("G4_BATCH_BACKEND") ? getenv("G4_BATCH_BACKEND") : "cpu";
    mp.tokenizer_path = tok;
    if (g4cu_model_load(g4t_env("G4_TINY_PKG"), &mp, &model)) {
        fprintf(stderr, "test_batch: %s\n", g4cu_last_error());
        return 1;
    }
    // Both kinds of round, whatever the caller's environment (engine/batch.h): prompts as rows
    // of the decode step (the default: G4_BATCH_PROMPT_ROWS unset), then the earlier rounds
    // (G4_BATCH_PROMPT_ROWS=0); the other knobs that change a round (G4_BATCH_ROWS,
    // G4_BATCH_PREFILL_ONE) unset, the cases that want them set them.
    const char *knobs[3] = {"G4_BATCH_PROMPT_ROWS", "G4_BATCH_ROWS", "G4_BATCH_PREFILL_ONE"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(knobs[i]);
        saved[i] = v ? g4_strdup(v) : NULL;
        unsetenv(knobs[i]);
    }
    for (int pass = 0; pass < 2; pass++) {
        rows_on = pass == 0;
        if (!rows_on) setenv("G4_BATCH_PROMPT_ROWS", "0", 1);
        printf("test_batch: %s\n", rows_on ? "prompts as rows of the decode step (the default)"
                                           : "G4_BATCH_PROMPT_ROWS=0 (the earlier rounds)");
        test_four_kinds();
        test_cancel_and_reuse();
        test_lengths();
        test_prefill_budget();
        test_long_beside_decode();
        test_conversation_and_refusals();
        test_hostile();
        if (rows_on) test_earlier_rounds(); // (what the default falls back to)
    }
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(knobs[i], saved[i], 1);
        else
            unsetenv(knobs[i]);
        free(saved[i]);
    }
    g4cu_model_free(model);
    free(tok);
    return g4t_finish("test_batch");
}
