// test_gemv3_form.c: the parse of G4_GEMV3_ACC / G4_GEMV3_PIPE (kernels/gemv3_form.h), which
// picks the Q4 GEMV third design's loop form (issue 29's variants, kernels/gemm_q4.cu
// gemv_q4_v3_kernel's ACC and PIPE). No GPU: every accepted pair gives its form and an empty
// error, every rejected value -1 and one line naming the variable and the value. The forms'
// results run on the GPU (tests/test_cuda_gemm.c: each third-design case under every form).
#include <string.h>

#include "kernels/gemv3_form.h"
#include "tests/test_util.h"

// acc, pipe -> want (a form, or -1 with err holding `has`)
static void one(const char *acc, const char *pipe, int want, const char *has) {
    char err[160] = "stale";
    const int got = g4_gemv3_form_parse(acc, pipe, err, sizeof err);
    CHECK_MSG(got == want, "ACC=%s PIPE=%s: form %d, expected %d", acc ? acc : "(unset)",
              pipe ? pipe : "(unset)", got, want);
    if (want >= 0)
        CHECK_MSG(err[0] == 0, "ACC=%s PIPE=%s: error '%s' on an accepted pair", acc ? acc : "-",
                  pipe ? pipe : "-", err);
    else
        CHECK_MSG(strstr(err, has) && !strchr(err, '\n'), "ACC=%s PIPE=%s: error '%s', wanted '%s'",
                  acc ? acc : "-", pipe ? pipe : "-", err, has);
}

int main(void) {
    // accepted: unset / empty are the defaults
    one(NULL, NULL, G4_GEMV3_FORM_TODAY, NULL);
    one("", "", G4_GEMV3_FORM_TODAY, NULL);
    one("1", "0", G4_GEMV3_FORM_TODAY, NULL);
    one("2", NULL, G4_GEMV3_FORM_ACC2, NULL);
    one("2", "0", G4_GEMV3_FORM_ACC2, NULL);
    one(NULL, "1", G4_GEMV3_FORM_PIPE, NULL);
    one("1", "1", G4_GEMV3_FORM_PIPE, NULL);
    one(NULL, "2", G4_GEMV3_FORM_XPF, NULL);
    one("1", "2", G4_GEMV3_FORM_XPF, NULL);
    // rejected: values outside the sets, each naming its variable and value
    one("3", NULL, -1, "G4_GEMV3_ACC=3: expected 1 or 2");
    one("0", NULL, -1, "G4_GEMV3_ACC=0: expected 1 or 2");
    one("2x", NULL, -1, "G4_GEMV3_ACC=2x");
    one(" 2", NULL, -1, "G4_GEMV3_ACC= 2");
    one(NULL, "3", -1, "G4_GEMV3_PIPE=3: expected 0, 1 or 2");
    one(NULL, "yes", -1, "G4_GEMV3_PIPE=yes");
    one("1", "-1", -1, "G4_GEMV3_PIPE=-1");
    // both on: not built together
    one("2", "1", -1, "G4_GEMV3_ACC=2 with G4_GEMV3_PIPE=1: one at a time");
    one("2", "2", -1, "G4_GEMV3_ACC=2 with G4_GEMV3_PIPE=2: one at a time");
    // the first invalid variable is the one named
    one("9", "9", -1, "G4_GEMV3_ACC=9");
    return g4t_finish("test_gemv3_form");
}
