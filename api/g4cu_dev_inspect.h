// g4cu_dev_inspect.h: g4cu_dev_inspect's JSON form (api/g4cu_dev_inspect_json.c) and what it
// shares with the text form (the tensor look-up and statistics of --tensor). Not installed.
#ifndef G4_DEV_INSPECT_H
#define G4_DEV_INSPECT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "loader/package.h"

typedef struct {
    uint64_t finite, nan, inf;
    double min, max, mean, abs_mean; // over the finite values (0 when there are none)
} g4_inspect_stats;

// The tensor `name` in any component (*where: its component), or NULL.
const g4_tensor *g4_inspect_find(const g4_package *p, const char *name, const g4_component **where);
// Statistics of a numeric (not packed 4-bit) tensor.
void g4_inspect_tensor_stats(const g4_tensor *t, g4_inspect_stats *st);

// Prints the package (or, with tensor != NULL, that tensor) as one JSON object on f (its keys:
// include/g4cu_dev.h, g4cu_dev_inspect_params.json). issues: the inconsistencies found (the
// caller keeps it). Errors: a tensor not found.
int g4_inspect_json(FILE *f, const g4_package *p, const char *tensor, int tables, cJSON *issues);

#endif
