#!/usr/bin/env bash
# Executed instructions (valgrind's Ir count) of one run of each optimization pass on the
# synthetic 10k- and 100k-instruction modules of `hloc bench --scaling`: the algorithmic
# cost of a pass without the cache and page-fault effects that wall time includes.
# A near-linear pass shows a 100k/10k ratio close to 10.
#
#   cargo build --release -p hlo-tools && tools/pass_instruction_counts.sh   # ~10 min
set -euo pipefail
cd "$(dirname "$0")/.."
HLOC=${HLOC:-target/release/hloc}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$HLOC" bench --scaling --repeat 1 --synthetic-dir "$dir" >/dev/null
ir() { # module passes -> executed instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$HLOC" opt "$1" --passes "$2" -o "$dir/out.hlo" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-36s %14s %14s %8s\n' pass "10k Ir/run" "100k Ir/run" ratio
prefix=inline-calls,algebraic-simplifier,constant-folding,tuple-simplifier,cse,dce
for p in inline-calls algebraic-simplifier constant-folding tuple-simplifier cse dce while-loop-invariant-code-motion fusion multi-output-fusion; do
  row=()
  for n in 10000 100000; do
    f=$(ls "$dir"/synthetic_*.hlo | sort -V | sed -n "$([ $n = 10000 ] && echo 2 || echo 3)p")
    if [ "$p" = inline-calls ]; then a=$(ir "$f" dce); b=$(ir "$f" dce,$p)
    elif [[ "$p" == *fusion ]]; then a=$(ir "$f" $prefix,fusion); b=$(ir "$f" $prefix,fusion,$p); [ "$p" = fusion ] && { a=$(ir "$f" $prefix); b=$(ir "$f" $prefix,fusion); }
    else a=$(ir "$f" $prefix); b=$(ir "$f" $prefix,$p); fi
    row+=($((b - a)))
  done
  printf '%-36s %14d %14d %7.1fx\n' "$p" "${row[0]}" "${row[1]}" "$(echo "${row[1]} / ${row[0]}" | bc -l)"
done
