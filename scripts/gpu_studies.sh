#!/usr/bin/env bash
# The studies too large for a 2-core CPU (seed 001 at n >= 64 owners: 36 h per dataset there, minutes on one
# GPU; seed 002's CIFAR-10 grid; DP-REC's 1,000 rounds), run on a GPU machine that was sent a copy of this tree,
# in priority order, until a deadline. Used on a lent H200 for papers/huang_jdp/results/table1-{mnist,fashion-mnist}/gpu
# (jobs t1m, t1f) and their dp-tuned variants (t1mt; t1ft up to n = 256, with 24 of n = 512's 25 parts stored),
# and on a second one for Figure 1's dp-tuned n = 512 (f1t), Table 4's dp-tuned n = 256 half (t4t) and 22 of
# Table 2's 40 parts (t2), and on a third for 6 of the 54 parts of seed 002's CIFAR-10 grid (c10, at the study's 4
# configurations per call); the default JOBS are what is left, issue 67's first: Huang et al.'s Table 1 with central
# noise (t1mc, t1mce; Fashion-MNIST after its rate, lrfc then t1fc) and DP-REC's client-split ablation (hsu).
#
# The data travel in a folder the device tool carries (64 MiB with the tree): MNIST (11 MiB) serves every job but
# t1f/t1ft/lrfc/t1fc (Fashion-MNIST, 29 MiB) and c10 (cifar10-subset, 14 MiB); all three do not fit beside the tree.
#
#   JAXFL_DATA_DIR=... JAXFL_SOURCE_COMMIT=$(git rev-parse HEAD) OUT=/some/dir BUDGET=540 bash scripts/gpu_studies.sh
#
# Needs python3 with jaxfl's dependencies and a CUDA jax (wheels in .whl/ are installed first, if present, for a
# machine without a network). JAXFL_SOURCE_COMMIT names the shipped commit in results (the copy may sit beside
# a .git that is not its own). Each study's folder is tarred into $OUT after every invocation. JOBS picks
# studies (default: all, in the order below); ONESHOT=1 passes all of a study's panels to one invocation,
# else each invocation adds one panel, so every invocation ends with a results.json over the panels finished
# (the earlier panels' stored parts are reused). CPB=N runs every grid program N configurations per compiled call
# instead of the study's own number (`jaxfl reproduce --configs-per-batch`; stored parts are reused only at the same N).
set -uo pipefail
: "${OUT:?set OUT to a folder for the tarred results}" "${JAXFL_DATA_DIR:?set JAXFL_DATA_DIR}"
BUDGET=${BUDGET:-540}
deadline=$((SECONDS + BUDGET))
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "${TMPDIR:-/tmp}/jaxfl-site" .whl/*.whl || exit 1
  export PYTHONPATH="${TMPDIR:-/tmp}/jaxfl-site"
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-${TMPDIR:-/tmp}/jaxfl-jax-cache}
export PYTHONUNBUFFERED=1
python3 -c 'import jax; print("jax", jax.__version__, jax.devices())' || exit 1

study() {  # TAG NAME OUT VARIANT PANEL...
  local tag=$1 name=$2 out=$3 variant=$4; shift 4
  local args=(reproduce "$name" --out "$out") steps=("$@")
  [ -n "$variant" ] && args+=(--variant "$variant")
  [ -n "${CPB:-}" ] && args+=(--configs-per-batch "$CPB")
  [ -n "${ONESHOT:-}" ] || [ $# -eq 0 ] && { for p in "$@"; do args+=(--panel "$p"); done; steps=(all); }
  for p in "${steps[@]}"; do
    [ "$p" = all ] || args+=(--panel "$p")
    local left=$((deadline - SECONDS))
    if [ $left -lt 30 ]; then echo "== $tag: deadline, stopped before $p"; return 1; fi
    echo "== $tag: up to $p ($left s left)"
    timeout $left python3 -m jaxfl "${args[@]}" 2>&1 | tee -a "$OUT/log.txt"
    tar czf "$OUT/$tag.tgz" "$out"
  done
}

big=("n = 64" "n = 128" "n = 256" "n = 512")
R=papers/huang_jdp/results
# Issue 15's CIFAR-10 grid first (the one full form not run anywhere yet: ~1.7 h of H200 time at 4 configurations per
# call, an estimate; papers/huang_jdp/README.md), then Table 1's last dp-tuned part and Table 2 at Table 1's rate (n = 256,
# where its eps-1 rows should sit at chance as Table 1's DP rows do). DP-REC's 1,000 rounds (rec) ran in full on the
# CPU; on a GPU only on request.
for job in ${JOBS:-t1mc t1mce lrfc t1fc hsu c10 t1ft t2 ann}; do
  case $job in
    t1m) study t1m huang-jdp/table1-mnist $R/table1-mnist/gpu "" "${big[@]}" ;;
    t1f) study t1f huang-jdp/table1-fashion-mnist $R/table1-fashion-mnist/gpu "" "${big[@]}" ;;
    t1mt) study t1mt huang-jdp/table1-mnist $R/table1-mnist/gpu/dp-tuned dp-tuned "${big[@]}" ;;
    t1ft) study t1ft huang-jdp/table1-fashion-mnist $R/table1-fashion-mnist/gpu/dp-tuned dp-tuned "${big[@]}" ;;
    t2) study t2 huang-jdp/table2 $R/table2/gpu "" "n = 256" ;;
    t2t) study t2t huang-jdp/table2 $R/table2/gpu/dp-tuned dp-tuned "n = 256" ;;
    f1t) study f1t huang-jdp/figure1 $R/figure1/gpu/dp-tuned dp-tuned "n = 512" ;;  # n <= 256: CPU
    t4t) study t4t huang-jdp/table4 $R/table4/gpu/dp-tuned dp-tuned "n = 256, m/r = 1" "n = 256, m/r = 2" \
           "n = 256, m/r = 5" "n = 256, m/r = 10" "n = 256, m/r = 20" ;;
    c10) study c10 lowy-nonconvex/cifar10 papers/lowy_nonconvex/results/cifar10/gpu "" ;;   # issue 15: the full grid
    rec) study rec dprec/mnist papers/dprec/results/mnist/gpu "" ;;                        # issue 15: 1,000 rounds
    ann) study ann lowy-nonconvex/mnist papers/lowy_nonconvex/results/mnist/authors-noise/gpu authors-noise \
           "M = 12, R = 50" "M = 25, R = 50" ;;   # issue 67: the R = 50 panels (~1.5 h of 2-core CPU)
    lrfc) study lrfc huang-jdp/dp-learning-rate $R/dp-learning-rate/fashion-mnist-central fashion-mnist-central ;;
    t1mc) study t1mc huang-jdp/table1-mnist $R/table1-mnist/gpu/central central "n = 4" "n = 16" "${big[@]}" ;;
    t1mce) study t1mce huang-jdp/table1-mnist $R/table1-mnist/gpu/central-epochs central-epochs "n = 64" "n = 128" \
             "n = 256" "n = 512" "n = 16" "n = 4" ;;   # E as epochs: n = 4 takes 15,620 global steps
    t1fc) study t1fc huang-jdp/table1-fashion-mnist $R/table1-fashion-mnist/gpu/central central "n = 4" "n = 16" \
            "${big[@]}" ;;   # after lrfc (its rate), committed
    hsu) study hsu dprec/mnist papers/dprec/results/mnist/hsu-split-seeds hsu-split-seeds ;;  # issue 67: ~11 h of CPU
    *) echo "unknown job $job"; exit 2 ;;
  esac
done
echo "== done at $SECONDS s"
