#!/usr/bin/env bash
# The thread-scaling table (`hloc bench threads`) on a many-core host, as one prepared run
# that writes each result as soon as it exists, so that a hang or a time limit loses only
# the step it stopped in. For the project's `device` machine (x86-64, JAX preinstalled,
# no network): carry a release `hloc` and the data it reads, then run this from the
# repository root there:
#
#   here:   mkdir -p .dev/shared && cp target/release/hloc .dev/ && strip .dev/hloc
#           cp -r ../shared/bench ../shared/xla-oracle .dev/shared/
#           (`.dev/` listed in .git/info/exclude, so that it travels untracked)
#   there:  OUT=$OUT bash tools/device_threads.sh [thread counts, default "1,<all CPUs>"]
#           (about 7 minutes: a `run` with timeout_s=590)
#
# `hloc` finds ../shared from the path it was built at (/work/main), so the script links
# /work/main to this checkout and /work/shared to .dev/shared when they are missing, and
# runs XLA with the host's python3 (ORACLE_PYTHON) on the CPU.
set -u
out="${OUT:-/tmp/device-threads}"
mkdir -p "$out"
hloc="${HLOC:-.dev/hloc}"
mkdir -p /work
[ -e /work/main ] || ln -s "$PWD" /work/main
[ -e /work/shared ] || ln -s "$PWD/.dev/shared" /work/shared
export ORACLE_PYTHON="${ORACLE_PYTHON:-python3}" JAX_PLATFORMS=cpu
counts="${1:-1,$(nproc)}"

{ lscpu; echo; nproc; uptime; } >"$out/machine.txt" 2>&1
# A short probe first: every bench case once, ours only.
timeout 120 "$hloc" bench jit --bench-set --runs 1 --repeat 1 >"$out/probe.txt" 2>&1
echo "probe: exit $?" >>"$out/probe.txt"
# One run for all counts (the efficiency column needs the first); it prints each count's
# measurements as they finish, so a cut-off run still leaves the earlier ones.
timeout 440 "$hloc" bench threads --threads "$counts" --runs 3 --repeat 5 >"$out/threads.txt" 2>&1
echo "exit $?" >>"$out/threads.txt"
# Where the time goes on every CPU: per kernel kind, and the parts each of the slowest loop
# kernels ran in (`--stats`), for the two steps farthest from the targets.
for case in train_transformer_sgd train_cnn_sgd; do
  HLOC_THREADS="$(nproc)" timeout 40 "$hloc" run "/work/shared/bench/$case.hlo" --repeat 5 \
    --stats >"$out/stats_$case.txt" 2>&1
  echo "exit $?" >>"$out/stats_$case.txt"
done
# What the transformer steps' time on every CPU depends on, ours only, two alternating
# rounds: idle threads spinning through a run instead of sleeping between kernels
# (`HLOC_SPIN=1`: hand-offs to sleeping threads), four GEMM blocks per thread
# (`HLOC_GEMM_BLOCKS=4`: late threads), both, and half the threads (SMT siblings, memory
# bandwidth). One line per run, written as it finishes.
n="$(nproc)"
for round in 1 2; do
  for knobs in "HLOC_THREADS=$n" "HLOC_THREADS=$n HLOC_SPIN=1" "HLOC_THREADS=$n HLOC_GEMM_BLOCKS=4" \
    "HLOC_THREADS=$n HLOC_SPIN=1 HLOC_GEMM_BLOCKS=4" "HLOC_THREADS=$((n / 2))"; do
    for case in train_transformer_sgd train_transformer_bf16; do
      # shellcheck disable=SC2086 # the knobs are words on purpose
      t="$(env $knobs timeout 30 "$hloc" run "/work/shared/bench/$case.hlo" --repeat 10 2>&1 |
        grep -o 'median execution [0-9.]* µs')"
      echo "round $round  $case  $knobs  ${t:-failed}" >>"$out/knobs.txt"
    done
  done
done
