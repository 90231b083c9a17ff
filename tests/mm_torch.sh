# mm_torch.sh: what the train_mm_proxy / mm_parity checks share (sourced): torch_python NAME
# MODULES [VERSION] sets $py to $G4_TORCH_PYTHON when it imports MODULES (a python import list)
# and, given VERSION, runs that transformers (5.17: the GPU image's; 5.25 fails inside the audio
# tower's mask, bench/NOTES.md); otherwise it prints why NAME is skipped and exits 77 (CI's
# tools/install_deps.sh installs no torch).
torch_python() {
    local name=$1 mods=$2 want=${3:-} v
    py=${G4_TORCH_PYTHON:-}
    if [ -z "$py" ] || [ ! -x "$py" ] || ! "$py" -c "import $mods" 2>/dev/null; then
        echo "$name: skipped: no python with $mods (set G4_TORCH_PYTHON; CI installs none)"
        exit 77
    fi
    [ -z "$want" ] && return 0
    v=$("$py" -c 'import transformers; print(transformers.__version__)')
    case $v in
    "$want".*) ;;
    *)
        echo "$name: skipped: transformers $v at $py, the trainer and mm_parity need $want"
        exit 77
        ;;
    esac
}
