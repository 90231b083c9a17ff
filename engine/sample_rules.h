// sample_rules.h: the host-side sampling rules of a request that asks for more than the
// device's sample op does (penalties, logit_bias, min_p, a JSON mask, log-probabilities): its
// logits row comes to the host each step and goes through, in this order:
//   1. repetition_penalty (HF RepetitionPenaltyLogitsProcessor): every token seen in the prompt
//      or the output so far: x > 0 ? x / r : x * r;
//   2. presence_penalty and frequency_penalty (OpenAI): x[t] -= presence * (c[t] > 0) +
//      frequency * c[t], c[t] the times t was generated so far (the output only);
//   3. logit_bias (OpenAI): x[id] += bias;
//   4. the JSON mask (engine/json_mask.h): tokens it refuses get -inf;
//   -- log-probabilities are taken here: log_softmax(x / T) over the whole vocabulary (T the
//      temperature, 1 when greedy): the distribution after 1-4, before the cuts below;
//   5. min_p (HF MinPLogitsWarper, after temperature): tokens with p < min_p * p_max get -inf,
//      i.e. x < x_max + T * ln(min_p);
//   6. the sample op's reference (g4_sample: top-k, top-p, the seeded draw, or argmax).
#ifndef G4_SAMPLE_RULES_H
#define G4_SAMPLE_RULES_H

#include <stdint.h>

#define G4_MAX_TOP_LOGPROBS 20

typedef struct {
    int32_t id;
    float bias; // added to the logit (OpenAI takes [-100, 100])
} g4_logit_bias;

typedef struct {
    float repetition; // > 0; 0 or 1: off
    float presence;   // 0: off
    float frequency;  // 0: off
    float min_p;      // [0, 1]; 0: off
    const g4_logit_bias *bias;
    int n_bias;
} g4_logit_rules;

// 1 when any rule is on.
int g4_logit_rules_active(const g4_logit_rules *r);
// User errors for values out of range (ids against V).
int g4_logit_rules_check(const g4_logit_rules *r, int V);
// Steps 1-3 on x[0..V). seen: [V] 1 for the tokens of the prompt and output (NULL without a
// repetition penalty); counts: [V] the output's counts (NULL without presence / frequency).
void g4_logit_rules_apply(const g4_logit_rules *r, float *x, int V, const uint8_t *seen,
                          const int32_t *counts);
// Step 5 (temperature <= 0, min_p <= 0: nothing).
void g4_min_p_apply(float min_p, float temperature, float *x, int V);

// A token's log-probability and the n_top most likely tokens' (largest first; ties: the
// smaller id first).
typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[G4_MAX_TOP_LOGPROBS];
    float top_logprob[G4_MAX_TOP_LOGPROBS];
} g4_token_logprob;

// log_softmax(x / T) of x[0..V) (T = temperature, or 1 when <= 0): the top n_top into out
// (out->id and out->logprob are set by g4_logprob_of). Returns the log of the normaliser,
// for g4_logprob_of. -inf entries have probability 0.
double g4_logprobs_top(const float *x, int V, float temperature, int n_top, g4_token_logprob *out);
// log p of x[id] under the same distribution.
float g4_logprob_of(const float *x, int V, float temperature, double log_z, int id);

#endif
