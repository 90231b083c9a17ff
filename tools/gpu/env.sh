# shellcheck shell=bash
# Source on the GPU machine (Ubuntu 24.04 + CUDA 13, no package registry): unpacks the Debian
# .deb files carried in .debs/ (fetched on a CPU machine with tools/gpu/fetch_debs.sh) into a
# prefix and points the build and the loader at it, and finds cuDNN.
G4_PREFIX=${G4_PREFIX:-/tmp/g4prefix}
if [ ! -d "$G4_PREFIX/usr" ]; then
    mkdir -p "$G4_PREFIX"
    for f in .debs/*.deb; do dpkg -x "$f" "$G4_PREFIX"; done
fi
# the mm calls' fonts (tools/gpu/fetch_mm_carry.sh), also when an earlier call on this machine
# made the prefix without them; from the carry the mm stages read ($MM_CARRY, run.sh's default)
g4_mm_fonts=${MM_CARRY:-.carry/mmdata}/fonts
if ls "$g4_mm_fonts"/*.deb >/dev/null 2>&1 && [ ! -d "$G4_PREFIX/usr/share/fonts/truetype/freefont" ]; then
    for f in "$g4_mm_fonts"/*.deb; do dpkg -x "$f" "$G4_PREFIX"; done
fi
unset g4_mm_fonts
export PATH="$G4_PREFIX/usr/bin:$PATH"
export LD_LIBRARY_PATH="$G4_PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMAKE_PREFIX_PATH="$G4_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
# cuDNN: system copy, or the one python's nvidia-cudnn wheel carries.
if [ -z "${G4_CUDNN_DIR:-}" ]; then
    for d in /usr/local/cuda /usr $(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null); do
        if [ -f "$d/include/cudnn.h" ]; then G4_CUDNN_DIR=$d; break; fi
    done
fi
if [ -n "${G4_CUDNN_DIR:-}" ]; then
    export CMAKE_PREFIX_PATH="$G4_CUDNN_DIR:$CMAKE_PREFIX_PATH"
    export LD_LIBRARY_PATH="$G4_CUDNN_DIR/lib:$G4_CUDNN_DIR/lib64:$LD_LIBRARY_PATH"
fi
export G4_CUDNN_DIR
# Python packages the image lacks (mobius-onnx and onnx-shape-inference for tools/python/
# export_package.py), carried as wheels in .whl/ (the image's onnx-ir 1.0.0 writes the external
# data with the same layout rule as the published packages: ascending size, 64 KiB alignment).
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/g4site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/g4site .whl/*.whl
fi
[ -d /tmp/g4site ] && export PYTHONPATH="/tmp/g4site${PYTHONPATH:+:$PYTHONPATH}"
