// onnx_model.h: one model.onnx parsed into a flat, validated tensor table plus its graph.
//
// Every initializer (and every Constant node's value) becomes a g4_tensor whose bytes are
// either inline (raw_data or typed fields in model.onnx) or inside a read-only mmap of the
// external-data file named by its `location`. Every offset, length, dtype and shape is checked
// at open: offset + length inside the file, length == numel x element size, a known dtype, no
// duplicate names, no `..` or absolute locations. Data pointers are not necessarily aligned.
#ifndef G4_ONNX_MODEL_H
#define G4_ONNX_MODEL_H

#include "base/base.h"

#define G4_MAX_DIMS 8

// TensorProto.DataType values (onnx.in.proto).
enum {
    G4_DT_UNDEFINED = 0,
    G4_DT_FLOAT = 1,
    G4_DT_UINT8 = 2,
    G4_DT_INT8 = 3,
    G4_DT_UINT16 = 4,
    G4_DT_INT16 = 5,
    G4_DT_INT32 = 6,
    G4_DT_INT64 = 7,
    G4_DT_STRING = 8,
    G4_DT_BOOL = 9,
    G4_DT_FLOAT16 = 10,
    G4_DT_DOUBLE = 11,
    G4_DT_UINT32 = 12,
    G4_DT_UINT64 = 13,
    G4_DT_BFLOAT16 = 16,
    G4_DT_UINT4 = 21,
    G4_DT_INT4 = 22,
};

// Bits per element of a numeric dtype; 0 for unknown or unsupported ones (STRING, complex).
int g4_dtype_bits(int dtype);
// "float16", "uint8", ... or "dtype(N)" for unknown values (static storage, not thread-safe
// for unknown values).
const char *g4_dtype_name(int dtype);

typedef enum {
    G4_TENSOR_INITIALIZER = 0,
    G4_TENSOR_CONSTANT = 1, // the value of a Constant node
} g4_tensor_kind;

typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t dims[G4_MAX_DIMS];
    uint64_t numel;
    uint64_t nbytes;
    const uint8_t *data;  // little-endian bytes, row-major; NULL when nbytes == 0
    g4_tensor_kind kind;
    int external;         // 1: in the external-data file
    const char *location; // external file name relative to the model's directory
    uint64_t offset;      // byte offset in that file
} g4_tensor;

typedef enum {
    G4_ATTR_FLOAT = 1,
    G4_ATTR_INT = 2,
    G4_ATTR_STRING = 3,
    G4_ATTR_TENSOR = 4,
    G4_ATTR_GRAPH = 5,
    G4_ATTR_FLOATS = 6,
    G4_ATTR_INTS = 7,
    G4_ATTR_STRINGS = 8,
    G4_ATTR_TENSORS = 9,
} g4_attr_type;

typedef struct {
    const char *name;
    int type;
    float f;
    int64_t i;
    const uint8_t *s; // STRING (not NUL-terminated)
    size_t s_len;
    const float *floats;
    size_t n_floats;
    const int64_t *ints;
    size_t n_ints;
    const g4_tensor *t; // TENSOR (also present in the tensor table for Constant nodes)
} g4_attr;

typedef struct {
    const char *name;
    const char *op_type;
    const char *domain; // "" for the default ai.onnx domain
    int n_inputs;
    const char **inputs; // "" for an omitted optional input
    int n_outputs;
    const char **outputs;
    int n_attrs;
    g4_attr *attrs;
} g4_node;

typedef struct {
    const char *name;
    int elem_type; // 0 when the type is not given
    int ndim;      // -1 when the shape is not given
    int64_t dims[G4_MAX_DIMS];
    const char *dim_params[G4_MAX_DIMS]; // symbolic name, or NULL for a fixed dim
} g4_value_info;

typedef struct g4_onnx_model {
    char *path; // model.onnx
    char *dir;  // its directory (external locations are relative to it)
    int64_t ir_version;
    const char *producer;
    int n_opsets;
    const char **opset_domains;
    int64_t *opset_versions;
    int n_tensors;
    g4_tensor *tensors;
    int n_nodes;
    g4_node *nodes;
    int n_inputs;
    g4_value_info *inputs;
    int n_outputs;
    g4_value_info *outputs;
    uint64_t external_bytes; // sum of nbytes over external tensors
    struct g4_onnx_private *priv;
} g4_onnx_model;

// Parses and validates path. On error *out is NULL and g4_error() names the file and tensor.
int g4_onnx_open(const char *path, g4_onnx_model **out);
// Parses an in-memory model (for the fuzzer and tests); external data resolves against dir.
int g4_onnx_parse(const uint8_t *bytes, size_t size, const char *path_for_errors,
                  const char *dir, g4_onnx_model **out);
void g4_onnx_close(g4_onnx_model *m);

// Initializer or Constant-node value by exact name; NULL when absent.
const g4_tensor *g4_onnx_tensor(const g4_onnx_model *m, const char *name);
// The node producing value `name`, or NULL (graph input, initializer or unknown).
const g4_node *g4_onnx_producer(const g4_onnx_model *m, const char *name);
// Nodes consuming value `name`: writes up to max pointers, returns the total count.
int g4_onnx_consumers(const g4_onnx_model *m, const char *name, const g4_node **out, int max);
// Graph input by name, or NULL.
const g4_value_info *g4_onnx_input(const g4_onnx_model *m, const char *name);

const g4_attr *g4_node_attr(const g4_node *n, const char *name);
// INT attribute or def when absent.
int64_t g4_node_attr_int(const g4_node *n, const char *name, int64_t def);
// FLOAT attribute or def when absent.
float g4_node_attr_float(const g4_node *n, const char *name, float def);

// Element i of a numeric tensor as double (fp16/bf16/float/ints/uint8/bool; not 4-bit types).
double g4_tensor_get(const g4_tensor *t, uint64_t i);
// Copies a float16/bfloat16/float32 tensor into dst (numel floats) as float32.
int g4_tensor_to_f32(const g4_tensor *t, float *dst);
// Non-finite (NaN, Inf) elements of a float16 / bfloat16 / float32 / double tensor (0 for other
// dtypes); *first (when not NULL and some are) gets the first one's index. Reads every byte at
// memory speed (a word-parallel test of the exponent bits).
uint64_t g4_tensor_nonfinite(const g4_tensor *t, uint64_t *first);
// G4_OK when the tensor holds no NaN or Inf; else a user error naming file and the tensor, with
// the count and the first one. Every weight the engine binds passes through it
// (g4_component_get, g4_linear_get), and `g4cu inspect` runs it on every tensor.
int g4_tensor_check_finite(const g4_tensor *t, const char *file);
// "[1536, 2048]" into buf.
const char *g4_tensor_shape_str(const g4_tensor *t, char *buf, size_t n);

#endif
