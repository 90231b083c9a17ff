// step_plan.h: the one-token decode step as a static plan of instructions with dependency
// counters (issue 30 stage 2 groundwork; CPU only, no device code), and the checks a device
// interpreter would rely on.
//
// A plan is the step's instruction list in its sequential order (the order the engine's
// compute() would run the same work). Every instruction names its op, its layer, the feature
// tiles (16 features a tile, as the GEMV kernels) and K range it covers, the buffer regions it
// reads and writes (buffer id + element range; weights are read-only and not tracked), the
// counters it waits on (id, target) and the one counter it signals. A persistent kernel's CTAs
// would each run a static queue of them, waiting on the counters instead of kernel boundaries.
//
// Two granularities:
//   G4_SP_KERNEL: one instruction per op call of today's step (a CUDA launch each, the decode
//     attention's split + merge counted as one), each waiting on the one before: the trivially
//     correct sequential plan, whose regions tests/test_step_plan.c checks against the buffers
//     a real CPU step's op calls touch.
//   G4_SP_TILE: the stage-2 design, from the config and the q|k|v flags only (it fuses what the
//     other switches choose between). GEMVs as groups of feature tiles (a group never straddles
//     a head, a down K chunk or a PLE slice); the add-norm a GEMV's input needs recomputed in every
//     group's prologue from the whole residual and block output (the first group of an op also
//     writes the new residual); q|k|v -> head preparation -> attention split -> o per KV head (the
//     o GEMV split along K by KV head, its prologue merging that head's splits); gate|up tiles ->
//     down K chunks handed over per chunk (a down chunk waits only for the gate|up tiles of its
//     K range); the K-chunk partials of o and down summed, in chunk order, by their consumers'
//     prologues; the final norm, the LM head tiles and the sample at the end.
//
// Counters: one 32-bit counter per 128-byte line (counter i at byte 128 i of the counter area:
// no two counters, and no data, share a line). A counter counts the instructions of one
// producer set that have finished (their stores published before the count); a wait's target
// is that set's size, so a wait orders the waiter after every instruction of the set. Two
// consecutive steps use two counter banks (step s bank s & 1), so no reset is needed between
// them (g4_sp_opts.steps = 2 checks that pair). A device that keeps one bank instead, its
// targets growing by each counter's per-step count every step, needs that count the same every
// step (fixed_splits) and every instruction of a step ordered before the next step's first
// (g4_sp_check's join check).
#ifndef G4_STEP_PLAN_H
#define G4_STEP_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "loader/model_config.h"

struct g4_text_state;

typedef enum { G4_SP_KERNEL = 0, G4_SP_TILE = 1 } g4_sp_grain;

// Buffers (the state's activations, text_model.h, plus the tile plan's partials), then the KV
// caches: one buffer per (slot, KV head, K or V), [capacity rows, head_dim] each.
typedef enum {
    G4_SB_IDS,    // I32 [1]
    G4_SB_POS,    // I32 [1]
    G4_SB_SAMP,   // sampler parameters
    G4_SB_H,      // F32 [H] residual
    G4_SB_H2,     // F32 [H] the other residual buffer
    G4_SB_X,      // [H] normed input
    G4_SB_Q,      // [heads * hd_max]
    G4_SB_K,      // [kv * hd_max]
    G4_SB_V,      // [kv * hd_max]
    G4_SB_QKV,    // [(heads + 2 kv) * hd_max]
    G4_SB_ATTN,   // [heads * hd_max]
    G4_SB_O,      // [H]
    G4_SB_MLP,    // [ffn_max]
    G4_SB_PLE,    // [L * P]
    G4_SB_PG,     // [P]
    G4_SB_PY,     // [H]
    G4_SB_LOGITS, // F32 [V]
    G4_SB_NEXT,   // I32 [1]
    G4_SB_APART,  // tile plan: F32 [kv][splits][group heads][hd + 2] attention split partials
    G4_SB_OPART,  // tile plan: F32 [kv][H] o partials, one K chunk (KV head) each
    G4_SB_DPART,  // tile plan: F32 [chunks][H] down partials, one K chunk each
    G4_SB_KV0     // first cache buffer: slot j, KV head g, K: KV0 + 2 (j kv + g), V: + 1
} g4_sp_buf;

typedef enum {
    G4_SP_EMBED,           // x = embed(ids) (tile plan: h too)
    G4_SP_CONVERT,         // h = x
    G4_SP_PLE_INPUTS,      // ple slice(s) in place
    G4_SP_RMSNORM,         // x = rmsnorm(h) * w (before layer 0)
    G4_SP_ADD_NORM,        // h = (h + rmsnorm(r) w) s, x = norm(h) (in place; the final norm)
    G4_SP_LINEAR,          // y (tiles) = x (K range) @ W
    G4_SP_ADD_NORM_LINEAR, // the add-norm then the linear (kernel plan: add_norm_linear)
    G4_SP_LINEAR_GELU_MUL, // gate|up without the add
    G4_SP_GELU_MUL,        // pg = gelu(pg) * ple slice
    G4_SP_QKV_PREP,        // head preparation, k / v stored at row pos
    G4_SP_ATTENTION,       // kernel: the decode attention; tile: one split of one KV head
    G4_SP_QKV_ATTENTION,   // preparation inside the attention
    G4_SP_MLP_BLOCK,
    G4_SP_PLE_BLOCK,
    G4_SP_SAMPLE,
    G4_SP_N_KINDS
} g4_sp_kind;

// The weight an instruction streams (none for the others).
typedef enum {
    G4_SW_NONE,
    G4_SW_PLE_MODEL_PROJ,
    G4_SW_QKV,
    G4_SW_Q,
    G4_SW_K,
    G4_SW_V,
    G4_SW_O,
    G4_SW_GATE_UP,
    G4_SW_DOWN,
    G4_SW_PLE_GATE,
    G4_SW_PLE_PROJ,
    G4_SW_LM_HEAD,
    G4_SW_MLP, // gate, up and down (mlp_block)
    G4_SW_PLE, // ple gate and projection (ple_block)
    G4_SW_N
} g4_sp_weight;

typedef struct {
    int32_t buf;    // g4_sp_buf, or a cache buffer >= G4_SB_KV0
    int32_t lo, hi; // elements [lo, hi) (the builder refuses buffers of 2^31 elements or more)
} g4_sp_region;

typedef struct {
    int counter, target;
} g4_sp_wait;

// (an attention reads / writes one cache region per KV head: at most G4_SP_MAX_KV heads)
enum { G4_SP_MAX_KV = 8, G4_SP_MAX_RD = 4 + 2 * G4_SP_MAX_KV, G4_SP_MAX_WR = 4 + 2 * G4_SP_MAX_KV };
enum { G4_SP_MAX_WAIT = 3 };

typedef struct {
    uint8_t kind;   // g4_sp_kind
    uint8_t weight; // g4_sp_weight
    uint8_t step;   // 0, or 1 for the second step of a two-step plan
    int16_t layer;  // -1: before the layers, n_layers: after them
    int32_t t0, t1; // output features [t0, t1) (GEMVs: whole 16-feature tiles but a segment's
                    // last); attention: KV head, split; PLE inputs: layer
    int32_t k0, k1; // input K range in elements (GEMVs)
    uint8_t n_rd, n_wr, n_wait;
    g4_sp_region rd[G4_SP_MAX_RD], wr[G4_SP_MAX_WR];
    g4_sp_wait wait[G4_SP_MAX_WAIT];
    int signal; // counter id, or -1
} g4_sp_instr;

typedef struct {
    int16_t layer; // -1 / n_layers as g4_sp_instr
    uint8_t step;
    const char *what; // "qkv", "att", "o", "gu", "down", ... (static strings)
} g4_sp_counter;

// The decode path's launch-level switches a state runs with (the same ones layer() in
// engine/text_decoder.c follows): they shape the kernel plan; the tile plan follows the config
// and qkv only (it fuses everything the switches choose between).
typedef struct {
    int fuse;       // add-norms inside the next linear (G4_FUSE, s->fuse_norm)
    int attn_fused; // head preparation inside the attention (G4_FUSE_ATTN=1 and the op)
    int mlp_block;  // the MLP as one op (G4_PERSIST_MLP=1 and the op)
    int ple_block;  // the PLE block as one op (G4_PLE_FUSED=1 and the op)
    uint8_t *qkv;   // [n_layers]: 1 where the layer runs q|k|v as one linear; NULL: none
} g4_sp_flags;

typedef struct {
    g4_sp_grain grain;
    int keys;           // keys the step's attention sees: its position + 1 (>= 1)
    int steps;          // 1, or 2: this step and the next (keys + 1), counters in two banks
    int group_tiles;    // tile plan: tiles a GEMV instruction (0: 4)
    int chunk_tiles;    // tile plan: the down GEMV's K chunk in tiles (0: 32)
    int lm_group_tiles; // tile plan: tiles an LM-head instruction (0: 64)
    int split_keys;     // tile plan: keys an attention split at most (0: 512)
    int max_splits;     // tile plan: splits a KV head at most (0: 16)
    int fixed_splits;   // tile plan: 1: max_splits a KV head at every length (the ones past the
                        // keys empty), so that no count depends on the position
} g4_sp_opts;

typedef struct {
    g4_sp_grain grain;
    int n, cap;
    g4_sp_instr *ins;
    int n_counters, cap_counters;
    g4_sp_counter *ctr;
    int n_bufs;
    int64_t *buf_elems; // [n_bufs]
    int n_layers, keys, steps, n_kv;
    int split_keys, max_splits, fixed_splits; // as built (the tile plan's split rule)
} g4_step_plan;

// The switches of state s's one-token step (s->fuse_norm, qkv_on and each layer's q|k|v weight,
// attn_fused_one, persist_mlp, ple_fused and the backend's ops). f->qkv is allocated: free it.
void g4_sp_flags_of_state(const struct g4_text_state *s, g4_sp_flags *f);

// The switches of a package made with q|k|v as one linear on every layer that owns its KV (what
// the engine runs when the package has the merged weights), norms fused, no blocks: the step
// skeleton's bench and test. f->qkv is allocated: free it.
void g4_sp_flags_owner_qkv(const g4_text_config *c, g4_sp_flags *f);

// Builds the plan of one (or two) one-token steps of config c; G4_OK, or a user error naming the
// shape it cannot tile. g4_sp_free releases it.
int g4_sp_build(const g4_text_config *c, const g4_sp_flags *f, const g4_sp_opts *o,
                g4_step_plan *p);
void g4_sp_free(g4_step_plan *p);
// The attention splits of a KV head the tile plan gives a step of `keys` keys on a layer with
// this window (0: full), and the first key (*lo) and keys a split (*per).
int g4_sp_splits(int keys, int window, int split_keys, int max_splits, int *lo, int *per);

// What the checks found: counts per class, and the first message of each.
typedef struct {
    int bounds;    // a region outside its buffer, or a bad counter id
    int unreached; // a wait target above the number of signalers of its counter
    int partial;   // a wait target below it (the wait orders after no particular producer)
    int cycle;     // counters waiting on each other
    int unwritten; // a read of elements nothing wrote before (in the step or before it)
    int raw, war, waw;
    int unjoined; // two steps: a first-step instruction not ordered before the second step's
                  // first instruction (counters reused across steps with targets grown by a
                  // step's count each step need every step to end in one join)
    int deadlock; // the simulation stopped with instructions left
    char first[12][200];
} g4_sp_report;
int g4_sp_report_errors(const g4_sp_report *r);
void g4_sp_report_print(const g4_sp_report *r, FILE *f);

// The static checks: counters (bounds, targets, cycles), then happens-before from the counter
// edges alone (a wait with the full target orders the waiter after every signaler; program
// order inside a CTA queue is NOT used, so the result holds for every assignment), then every
// pair of conflicting accesses in the sequential order checked: RAW, WAR, WAW. Returns the
// error count (g4_sp_report_errors).
int g4_sp_check(const g4_step_plan *p, g4_sp_report *r);

// An assignment of the instructions to G CTA queues: cta[i] for instruction i, and `order` (a
// permutation of 0 .. n-1: each CTA runs the instructions it owns in this order).
typedef enum {
    G4_SP_ROUND_ROBIN, // instruction i -> CTA i % G, list order
    G4_SP_RANDOM,      // a seeded random CTA per instruction, list order
    G4_SP_REVERSED     // CTA (G - 1 - i % G), and each op's instructions dealt out from its last
} g4_sp_assign_mode;
void g4_sp_assign(const g4_step_plan *p, int G, g4_sp_assign_mode mode, uint32_t seed, int *cta,
                  int *order);
// Runs the queues: a CTA starts its next instruction when its waits are met (all CTAs
// co-resident); returns the instructions run (p->n when none deadlocks), and counts a deadlock
// in r (with the first stuck CTA's instruction) when some are left.
int g4_sp_simulate(const g4_step_plan *p, int G, const int *cta, const int *order, g4_sp_report *r);

// Per-layer counts: instructions, counters (= 128-byte lines) and dependent hand-overs on the
// critical path (the longest chain of counter waits, as it grows across layer l).
typedef struct {
    int instr, counters, handovers;
} g4_sp_layer_count;
// out[n_layers + 2]: [0] before the layers, [1 + l] layer l, [n_layers + 1] after; first step
// only. Returns the whole step's critical-path hand-overs.
int g4_sp_count(const g4_step_plan *p, g4_sp_layer_count *out);

// Every instruction, a line of what it is, waits on and signals, and its regions (debugging).
void g4_sp_print(const g4_step_plan *p, FILE *f);

const char *g4_sp_kind_name(int kind);
const char *g4_sp_weight_name(int w);
// "h", "x", "kc3.0" (K cache of slot 3, KV head 0), ...; into buf.
const char *g4_sp_buf_name(const g4_step_plan *p, int buf, char *s, size_t n);

#endif
