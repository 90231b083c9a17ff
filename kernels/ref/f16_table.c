// f16_table.c: the exact fp16 -> fp32 lookup table the reference ops read weights through.
#include <pthread.h>

#include "base/base.h"
#include "kernels/ref/ref.h"

static float table[65536];
const float *g4_f16_table = table;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void) {
    for (uint32_t h = 0; h < 65536; h++) table[h] = g4_f16_to_f32((uint16_t)h);
}

void g4_ref_init(void) { pthread_once(&once, build); }
