// ext_layout.h: where a writer puts each initializer, by the rule onnx_ir's writer used for the
// packages (onnx/ir-py src/onnx_ir/external_data.py, releases up to v1.0.0; see
// ../shared/spec/onnx-package-format.md section 2.2, which rebuilds the real files' sizes from it):
//
//   - a tensor of at most 256 bytes stays inline in model.onnx (raw_data);
//   - the others go to the data file in ascending byte size, ties in initializer order;
//   - a tensor larger than 1 MiB starts at a multiple of 64 KiB (the gap is zero bytes), smaller
//     ones follow back to back.
#ifndef G4_EXT_LAYOUT_H
#define G4_EXT_LAYOUT_H

#include <stdint.h>

#define G4_EXT_INLINE_MAX  256u       // bytes: at most this stays inline
#define G4_EXT_ALIGN_ABOVE (1u << 20) // bytes: larger tensors are aligned
#define G4_EXT_ALIGN       65536u     // their alignment
#define G4_EXT_INLINE      UINT64_MAX // offsets[i] of an inline tensor

// sizes[n] (bytes, initializer order) -> offsets[n] in the data file (G4_EXT_INLINE for inline
// tensors). Returns the data file's size.
uint64_t g4_ext_layout(const uint64_t *sizes, int n, uint64_t *offsets);

#endif
