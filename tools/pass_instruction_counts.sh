#!/usr/bin/env bash
# Executed instructions (valgrind's Ir count, collected only inside the pass's `run`) of
# each optimization pass, run once on the synthetic 10k- and 100k-instruction modules of
# `hloc bench scaling`: the algorithmic cost of a pass without the cache and page-fault
# effects that wall time includes. A near-linear pass shows a 100k/10k ratio close to 10.
#
#   cargo build --release -p hlo-tools && tools/pass_instruction_counts.sh   # ~5 min
set -euo pipefail
cd "$(dirname "$0")/.."
HLOC=${HLOC:-target/release/hloc}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$HLOC" bench --scaling --repeat 1 --synthetic-dir "$dir" >/dev/null
ir() { # module pass type -> instructions executed inside `<type as Pass>::run`
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="<*::$3 as hlo_compiler::pipeline::Pass>::run" \
    "$HLOC" opt "$1" --passes "$2" -o "$dir/out.hlo" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-36s %14s %14s %8s\n' pass "10k Ir" "100k Ir" ratio
for pt in inline-calls:InlineCalls algebraic-simplifier:AlgebraicSimplifier constant-folding:ConstantFolding \
          tuple-simplifier:TupleSimplifier cse:Cse dce:Dce while-loop-invariant-code-motion:WhileLicm \
          fusion:Fusion multi-output-fusion:MultiOutputFusion; do
  p=${pt%%:*}; t=${pt##*:}
  a=$(ir "$dir/synthetic_10000.hlo" "$p" "$t"); b=$(ir "$dir/synthetic_100000.hlo" "$p" "$t")
  printf '%-36s %14d %14d %7.1fx\n' "$p" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done
