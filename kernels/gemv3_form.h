// gemv3_form.h: the loop forms of the Q4 GEMV's third design (kernels/gemm_q4.cu
// gemv_q4_v3_kernel's ACC and PIPE; issue 29, bench/NOTES.md "gemvvar") and the parse of the two
// environment variables that pick one, G4_GEMV3_ACC (1 or 2) and G4_GEMV3_PIPE (0, 1 or 2). Plain C
// shared by the library and the CPU test tests/test_gemv3_form.c. Internal header.
#ifndef G4_GEMV3_FORM_H
#define G4_GEMV3_FORM_H

#include <stdio.h>
#include <string.h>

enum {
    G4_GEMV3_FORM_TODAY = 0, // one accumulator set, the refill after the step's math
    G4_GEMV3_FORM_ACC2 = 1,  // G4_GEMV3_ACC=2: two accumulator sets a step
    G4_GEMV3_FORM_PIPE = 2,  // G4_GEMV3_PIPE=1: the ring's refill half a step earlier
    G4_GEMV3_FORM_XPF = 3,   // G4_GEMV3_PIPE=2: x of the whole k range into L1 after the wait
};

// The form the two variables' values name (NULL or "" = unset: 1, 0); -1 and one line in err
// (n bytes) for anything else: a value outside its set, or both switched on at once (not built).
static inline int g4_gemv3_form_parse(const char *acc, const char *pipe, char *err, size_t n) {
    const int acc2 = acc && *acc && strcmp(acc, "1") != 0;
    const int pipe_on = pipe && *pipe && strcmp(pipe, "0") != 0;
    if (acc2 && strcmp(acc, "2") != 0) {
        snprintf(err, n, "G4_GEMV3_ACC=%s: expected 1 or 2", acc);
        return -1;
    }
    if (pipe_on && strcmp(pipe, "1") != 0 && strcmp(pipe, "2") != 0) {
        snprintf(err, n, "G4_GEMV3_PIPE=%s: expected 0, 1 or 2", pipe);
        return -1;
    }
    if (acc2 && pipe_on) {
        snprintf(err, n, "G4_GEMV3_ACC=2 with G4_GEMV3_PIPE=%s: one at a time (not built together)",
                 pipe);
        return -1;
    }
    if (n) err[0] = 0;
    return acc2                     ? G4_GEMV3_FORM_ACC2
           : !pipe_on               ? G4_GEMV3_FORM_TODAY
           : strcmp(pipe, "1") == 0 ? G4_GEMV3_FORM_PIPE
                                    : G4_GEMV3_FORM_XPF;
}

#endif
