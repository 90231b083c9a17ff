#!/usr/bin/env bash
# test_pdl_sass.sh: the programmatic-dependent-launch rule of kernels/pdl.cuh, checked on the
# built SASS (no GPU needed). Every kernel that kernels/*.cu and kernels/bench/*.cu (the bench
# rows' own kernels: the floors, the persistent hand-over kernels) launch through g4_pdl_launch*
# may start while the previous kernel still runs, so in each of its compiled variants:
#   - griddepcontrol.wait (SASS ACQBULK) is present, and no global-memory instruction (load,
#     store, atomic, reduction, cp.async, TMA, generic LD/ST, cache control other than the L2
#     prefetch CCTL.E.PF*) comes before the first one in program order, except the immutable
#     weights' stream loads (ldg_stream*: LDG.E...NA...CONSTANT, used for nothing else);
#   - griddepcontrol.launch_dependents (SASS PREEXIT) is present, after the wait.
#   - a call before the wait (a called integer division, say) reaches no such instruction either:
#     its body is followed from the target to its RET; a call to an absolute address (printf) or
#     an unknown target fails (kernels/spin.cuh's g4_spin_geq_at is a __noinline__ call: a spin
#     before the wait would otherwise pass unseen).
# Program order = the listing's order; the rule puts the wait in the straight-line prologue, so
# for these kernels that is the execution order up to the wait. A kernel name found at a launch
# site but in no SASS function fails (a renamed kernel or a launch written another way).
# Needs cuobjdump and nvdisasm ($CUOBJDUMP, PATH, the toolkit's, or tools/install_deps.sh's in .tools/);
# skips (77) without one.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
lib="$(dirname "$G4CU")/libg4_cuda.a"
cuobjdump=${CUOBJDUMP:-}
if [ -z "$cuobjdump" ]; then
    for d in "$(dirname "$(command -v cuobjdump || echo /none/x)")" \
        "$(dirname "$(command -v nvcc || echo /none/x)")" /usr/local/cuda/bin \
        "$G4_SOURCE_DIR/.tools/cuda/nvidia/cu13/bin"; do
        [ -x "$d/cuobjdump" ] && [ -x "$d/nvdisasm" ] && cuobjdump=$d/cuobjdump && break
    done
fi
if [ -z "$cuobjdump" ]; then
    echo "SKIP test_pdl_sass: no cuobjdump + nvdisasm (tools/install_deps.sh fetches them into .tools/, or set CUOBJDUMP)"
    exit 77
fi
export PATH="$(dirname "$cuobjdump"):$PATH" # cuobjdump runs the nvdisasm beside it
[ -f "$lib" ] || { echo "FAIL test_pdl_sass: $lib not found"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Kernel names at the launch sites (the first argument; the call may span lines).
perl -0777 -ne 'while (/\bg4_pdl_launch(?:_cluster|_ex)?\s*\(\s*([A-Za-z_]\w*)/g) { print "$1\n" }' \
    "$G4_SOURCE_DIR"/kernels/*.cu "$G4_SOURCE_DIR"/kernels/bench/*.cu | sort -u >"$tmp/names"
sites=$(cat "$G4_SOURCE_DIR"/kernels/*.cu "$G4_SOURCE_DIR"/kernels/bench/*.cu | perl -0777 -ne '$n = () = /\bg4_pdl_launch(?:_cluster|_ex)?\s*\(/g; print $n')
if [ ! -s "$tmp/names" ]; then
    echo "FAIL test_pdl_sass: no g4_pdl_launch call found in kernels/*.cu, kernels/bench/*.cu"
    exit 1
fi
"$cuobjdump" --dump-sass "$lib" >"$tmp/sass" 2>"$tmp/err" || {
    cat "$tmp/err"
    echo "FAIL test_pdl_sass: cuobjdump failed on $lib"
    exit 1
}

perl -e '
    my ($names, $sass, $sites) = @ARGV;
    open my $nf, "<", $names or die; chomp(my @names = <$nf>);
    my (%code, %addr, %arg, @order, $fn);
    open my $sf, "<", $sass or die;
    while (<$sf>) {
        if (/Function : (\S+)/) { $fn = $1; push @order, $fn unless $code{$fn}; $code{$fn} ||= []; next; }
        next unless defined $fn;
        if (m{^\s+/\*([0-9a-f]{4,})\*/\s+(?:\@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)(?:\s+(0x[0-9a-f]+))?}) {
            push @{$code{$fn}}, $2; push @{$addr{$fn}}, hex($1); push @{$arg{$fn}}, $3;
        }
    }
    my $bad_re = qr/^(?:LDG|STG|LD|ST|ATOM|ATOMG|RED|REDG|LDGSTS|UTMALDG|UTMASTG|UTMAREDG|UBLKCP|UBLKRED|SULD|SUST|SUATOM|SURED|TLD|TEX|CCTL)(?:\.|$)/;
    my ($fail, $checked, $calls) = (0, 0, 0);
    for my $n (@names) {
        my $tok = length($n) . $n; # the Itanium-mangled identifier
        my @fns = grep { index($_, $tok) >= 0 } @order;
        if (!@fns) { print "FAIL $n: launched through g4_pdl_launch but no SASS function matches $tok\n"; $fail++; next; }
        for my $f (@fns) {
            my @ops = @{$code{$f}};
            my ($wait) = grep { $ops[$_] eq "ACQBULK" } 0 .. $#ops;
            my ($trig) = grep { $ops[$_] eq "PREEXIT" } 0 .. $#ops;
            $checked++;
            if (!defined $wait) { print "FAIL $f: no griddepcontrol.wait (ACQBULK)\n"; $fail++; next; }
            my @early = grep { $ops[$_] =~ $bad_re && $ops[$_] !~ /^CCTL\.E\.PF[12]/ &&
                               $ops[$_] !~ /^LDG\.E(?:\.[A-Z0-9_]+)*\.NA(?:\.[A-Z0-9_]+)*\.CONSTANT$/ } 0 .. $wait - 1;
            # A call before the wait: its body (a separate SASS range: an integer division, say)
            # is scanned from the target to its RET with the same rule; a call to an absolute
            # address (printf) or to a target not found fails.
            for my $c (grep { $ops[$_] =~ /^CALL(?:\.|$)/ } 0 .. $wait - 1) {
                $calls++;
                my $t = $arg{$f}[$c];
                my ($ti) = defined $t && $ops[$c] =~ /^CALL\.REL/ ?
                    grep { $addr{$f}[$_] == hex($t) } 0 .. $#ops : ();
                if (!defined $ti) { print "FAIL $f: call before the wait to an unchecked target: $ops[$c] (#$c)\n"; $fail++; next; }
                for (my $i = $ti; $i <= $#ops && $ops[$i] !~ /^RET(?:\.|$)/; $i++) {
                    if ($ops[$i] =~ $bad_re && $ops[$i] !~ /^CCTL\.E\.PF[12]/ || $ops[$i] =~ /^(?:CALL|ACQBULK)/) {
                        print "FAIL $f: call before the wait (#$c) reaches $ops[$i] (#$i)\n"; $fail++; last;
                    }
                }
            }
            if (@early) {
                print "FAIL $f: global memory access before the wait: " .
                    join(", ", map { "$ops[$_] (#$_)" } @early[0 .. ($#early < 4 ? $#early : 4)]) . "\n";
                $fail++;
            }
            if (!defined $trig || $trig < $wait) {
                print "FAIL $f: no griddepcontrol.launch_dependents (PREEXIT) after the wait\n"; $fail++;
            }
        }
    }
    printf "test_pdl_sass: %d launch sites, %d kernels, %d compiled variants checked (%d calls before a wait followed), %d failures\n",
        $sites, scalar(@names), $checked, $calls, $fail;
    exit($fail ? 1 : 0);
' "$tmp/names" "$tmp/sass" "$sites"
