// spec_chartqa.h: the eval spec's ChartQA relaxed_correctness table (section 7.4, computed with
// lmms-eval's code): prediction, target, whether it scores 1. One copy for the metric test
// (test_metrics.c) and the scoring-pipeline test (test_eval_runner.c).
#ifndef G4_TESTS_SPEC_CHARTQA_H
#define G4_TESTS_SPEC_CHARTQA_H

typedef struct {
    const char *pred, *target;
    int want;
} g4t_chartqa_case;

static const g4t_chartqa_case g4t_chartqa_spec[] = {
    {"12", "12", 1},    {"12.5", "12", 1},
    {"12.6", "12", 1},  {"12.60", "12", 1},
    {"13", "12", 0},    {"50%", "0.5", 1},
    {"50", "50%", 0},   {"12%%", "0.12", 1},
    {"Yes", "yes", 1},  {"Dark Blue", "dark blue", 1},
    {"yes.", "yes", 0}, {"1,000", "1000", 0},
    {"1e3", "1000", 1}, {"1_000", "1000", 1},
    {"0", "0", 1},      {"0.0", "0", 0},
    {"-5", "5", 0},     {"2020", "2019", 1},
    {"nan", "12", 0},   {"inf", "12", 0},
};
enum { G4T_CHARTQA_SPEC_N = sizeof g4t_chartqa_spec / sizeof g4t_chartqa_spec[0] };

#endif
