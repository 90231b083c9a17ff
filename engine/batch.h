// batch.h: continuous batching on a pipeline: up to `slots` requests at once, each in a slot that
// owns a text state (its own KV cache, sampler and soft rows), decoded together by one step
// (g4_text_batch_step: the linears with M = the number of rows). A request that ends (EOS, stop
// string, max_new, the context's end, cancel, or its own error) leaves the batch in the same
// round; its slot is free again once the caller takes its result (g4_batch_take), and the next
// request reuses the slot's state (its KV rows, workspaces and graph) without allocating, as one
// state serves request after request (g4_text_state_reserve grows it when a request needs more
// rows).
//
// A round (g4_batch_step), by default: ONE forward of the decode rows and the prompt rows together
// (prompts as rows of the decode step, g4_text_batch_step_rows; issue 31, measured on the H200 with
// serve --parallel 32: Q4 4,761 -> 5,883 completion tok/s, f16 4,903 -> 6,002). The requests still
// prefilling, oldest first, take prompt rows within min(the prefill budget (opts.prefill_tokens),
// the step's rows less the decode rows), each as many as fit (the last one cut to what is left: a
// prompt longer than that goes over several steps; a request's own chunk size applies only to its
// own forwards, below); the step's rows are at most slots + the pipeline's rows per forward (at
// most 4096), so its activations stay bounded. The last row of a prompt that ends in the step
// samples its first token (the step's pick, as the last prefill chunk's); its other rows sample
// nothing. A prompt with media (soft rows live in its own state) or with ids the step cannot take
// still gets a chunk of its own forward (its own chunk size, cut to what is left), before the step.
// Stats: each round counts as one decode step (its time, the prompt rows' included, in decode_s;
// prefill_s only for those own-forward chunks), each prompt given rows (or an own forward) in a
// round one prefill chunk, its rows in prefill_tokens. Needs the row-batched ops
// (g4_text_batch_rows_ops: not with G4_BATCH_ROWS=0) and slots >= 2; G4_BATCH_PREFILL_ONE does not
// apply.
//
// The earlier rounds (G4_BATCH_PROMPT_ROWS=0, read at g4_batch_new, for A/B; also a batch of one
// slot or without the row-batched ops): prefill chunks, each its own forward, within the prefill
// budget, then one decode step over every decoding slot, so a long prompt or an image never
// stalls the running streams for more than the budget: the oldest request still prefilling
// always gets a chunk (its own chunk size, cut to the budget), then each next one in submission
// order whose whole chunk fits in what is left (a chunk is never cut to fill the budget: a
// prompt keeps the chunks it gets alone unless the budget is below its chunk size), so short
// prompts submitted together start decoding in the same round. G4_BATCH_PREFILL_ONE=1 (for A/B)
// makes the budget the oldest's one chunk: one chunk a round.
//
// KV memory: one cache per slot, sized for its request (prompt + max_new, or opts.n_ctx; a
// reused slot too small for its next request grows to a multiple of G4_BATCH_KV_STEP rows), at
// most slots x n_ctx rows in all. The step's own state (slots >= 2) holds activations for its
// rows: slots, or with prompt rows slots + the pipeline's rows per forward (at most 4096; on
// CUDA ~72 KiB a row for E2B, f16 activations and the f32 residual: 544 rows at 32 slots,
// ~38 MiB, where 32 rows took ~2.3 MiB), and logits for the slots' rows (32 x 262144 f32 on
// E2B, 32 MiB, either way). Per-slot caches (not a pool of blocks): the decode step's
// row-batched ops (kernels/ops.h qkv_prep_rows, attention_rows) take a table of each row's
// contiguous cache, so every row keeps the cache its own one-row step (and graph) uses; a
// paged pool would need a block-table attention kernel on each backend first.
//
// Exactness: a request run in a batch gets the tokens g4_generate gives it alone on the same
// backend wherever the ops are row-independent (the CPU reference is: the tests check it, in
// both kinds of round): a prompt chunk of its own forward is the same g4_text_forward /
// g4_text_step on its own state, the decode rows and prompt rows the one-row ops applied per
// row (the row-batched ops; a prompt row attends to its cache's rows before it, those of the
// same step included, as a prefill forward does), and its own sampler and seed drawn at its own
// positions.
//
// Not thread-safe: one thread calls the functions of a batch (the C API's g4cu_batch locks).
#ifndef G4_BATCH_H
#define G4_BATCH_H

#include "engine/pipeline.h"

typedef struct {
    int slots; // requests decoded together (>= 1)
    int n_ctx; // KV rows each slot's state is made with (0: what its first request needs; a
               // larger request grows it), at most the model's context
    int prefill_tokens; // prompt tokens prefilled a round at most (0: the pipeline's rows per
                        // prefill forward, pl->max_tokens, 512: the largest chunk a request
                        // gets, so every prompt is chunked as alone, and short prompts waiting
                        // together share a round)
} g4_batch_opts;

typedef struct g4_batch g4_batch;

// The rows a slot's KV cache grows by at a time (see KV memory above).
#define G4_BATCH_KV_STEP 256

int g4_batch_new(g4_pipeline *pl, const g4_batch_opts *o, g4_batch **out);
void g4_batch_free(g4_batch *b);

// Starts a request in a free slot: *slot its slot (>= 0), or -1 when every slot is taken (then
// nothing is done: step and take results first). pr: one chat turn whose media went through
// their front ends (pipeline.h); the towers run here, into the slot's soft rows, and the
// template's <turn|> ends the turn as in g4_pipeline_generate. pr NULL: ids[0..n_ids) are the
// whole prompt (no template, no <turn|>). p is copied with its stop, ignore_stop and eos arrays
// and strings; on_text and cancel stay borrowed until the request ends. An error here (bad
// parameters, a prompt longer than the context, a broken medium) leaves the slot free.
int g4_batch_submit(g4_batch *b, const g4_prompt_loaded *pr, const int32_t *ids, int n_ids,
                    const g4_gen_params *p, int *slot);

// One round (see the top). *running: slots prefilling or decoding after it. A request's own
// error ends that request (its result holds it); only a failure of the batch itself (a broken
// step: every decoding row then ends with its error) is returned too.
int g4_batch_step(g4_batch *b, int *running);

// Ends the request in slot (prefilling or decoding) where it is: stop reason "cancelled", its
// tokens so far; it leaves the batch at once. Nothing for a free or finished slot.
void g4_batch_cancel(g4_batch *b, int slot);

// 1 when the request in slot has ended: its result moved into *out (as g4_generate's), its
// return code in *rc and, when that is not G4_OK, its error line in *err (malloc'ed); the slot
// is free again. 0 while it runs (or the slot is free): nothing moved.
int g4_batch_take(g4_batch *b, int slot, g4_gen_result *out, int *rc, char **err);

// Slots prefilling or decoding now / the most that ran in one decode step so far / the text
// states made so far (a state is made once per slot, then reused) / the reused states grown for
// a longer request / the decode rows stepped.
// Where the rounds' time went, cumulative wall seconds (CLOCK_MONOTONIC) of the calling thread
// (an asynchronous backend's device work is counted where the host waits for it):
// prefill_s in prefill chunks run in their own forward (the forward, the first token's pick and
// accept, a request ending there; with prompt rows only media prompts' chunks), decode_s in the
// decode step call (g4_text_batch_step(_rows) / g4_text_step: the forward over every row, prompt
// rows included, the sampler, the ids back to the host), accept_s in the host work after it for
// each row (stop checks, detokenizing for stop strings and streaming, the on_text callbacks,
// ending requests: the final text). prefill_chunks / prefill_tokens count every prompt's chunks
// and tokens, own forward or rows of a step (see the top).
typedef struct {
    int running, decoding, max_decoding, states_made, states_grown;
    long rounds, decode_steps, decode_rows;
    long prefill_chunks, prefill_tokens; // chunks run and prompt tokens they took
    double prefill_s, decode_s, accept_s;
} g4_batch_stats;
void g4_batch_get_stats(g4_batch *b, g4_batch_stats *st);

// Makes now what the slots' first requests would make: every free slot's state (KV cache of
// opts.n_ctx rows, workspaces, on CUDA its one-row graph) and the decode step's state (slots >=
// 2: activations for its rows, see KV memory above), so no request pays for them (a server at
// start-up). Needs opts.n_ctx > 0 (else each state is sized by its request). The memory is the
// bound batch.h states: slots x n_ctx KV rows, and the step's rows.
int g4_batch_reserve(g4_batch *b);

// Sets the prefill budget of the next rounds (as opts.prefill_tokens: >= 1, 0 the default).
int g4_batch_set_prefill_tokens(g4_batch *b, int n);

// One slot now: its phase (0 free, 1 prefilling, 2 decoding, 3 ended and not yet taken), its
// request's prompt rows, those prefilled so far, the tokens generated so far, the KV rows its
// state holds (0: no state made yet).
typedef struct {
    int phase, n_prompt, n_prefilled, n_generated, n_ctx;
} g4_batch_slot_state;
void g4_batch_get_slot(g4_batch *b, int slot, g4_batch_slot_state *out);

#endif
