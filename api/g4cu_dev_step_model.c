// g4cu_dev_step_model.c: `g4cu bench --step-model [--grid]` (include/g4cu_dev.h
// g4cu_dev_step_model): the step skeleton's CPU cost model (engine/step_cost.h), no GPU needed.
#include <g4cu_dev.h>

#include "api/api_internal.h"
#include "engine/step_cost.h"

int g4cu_dev_step_model(FILE *out, int grid, int top) {
    if (!out) return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_step_model: out is NULL"));
    if (top < 1)
        return g4_api_code(g4_fail(G4_EUSER, "g4cu_dev_step_model: top %d (1 or more)", top));
    return g4_api_code(g4_sc_report(out, grid, top));
}
