#!/usr/bin/env bash
# Rehearse a GPU call on this machine, as the lent GPU machine will run it (docs/gpu.md, "Rehearsed on a CPU"): a
# fresh virtual environment with the GPU image's versions and nothing of this project's, the bundle's wheels
# installed into it with --no-index (for this Python: 3.11 here, 3.12 there), then the call's script with
# --device cpu and small sizes. Run from anywhere:
#
#     bash bench/gpu/gpu_rehearsal.sh              # the check: bench/gpu/gpu_check.py, caps times TIME_SCALE (6)
#     bash bench/gpu/gpu_rehearsal.sh pretrain     # the pretraining: bench/gpu/gpu_pretrain.py within BUDGET (360 s),
#                                                  # then a fine-tuning from the checkpoint it brought back
#
# WORK (default ~/.cache/graphormer-urpe/gpu-rehearsal) holds the bundle, the installed wheels and one out-<time>/
# and work-<time>/ per rehearsal (earlier ones are kept); VENV (default ~/.cache/graphormer-urpe/gpu-rehearsal-venv)
# is created with the image's packages when it does not exist (a few GB: torch's CUDA build imports only with its
# nvidia-* wheels). BUILD_PYTHON (default: python, this project's environment) builds the bundle's data, which needs
# qm9pack, RDKit and molsets; the bundle is built once (delete WORK/bundle to rebuild it; one without the MOSES
# corpus is rebuilt). The check: PARTS (default: the check's own) and BUDGET (seconds, default 14400: a CPU compiles
# slowly) are passed on. The pretraining: BUDGET (default 360), TIME_SCALE (default 3: the probes' caps and the
# reserve) and CORES (default: all) are passed on, with a batch of 32 and small probes. Exit code: the call's, then
# the fine-tuning's.
set -euo pipefail
MODE=${1:-check}
case "$MODE" in
    check|pretrain) ;;
    *) echo "gpu_rehearsal.sh: unknown mode '$MODE' (check or pretrain)" >&2; exit 2 ;;
esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/graphormer-urpe
WORK=${WORK:-$CACHE/gpu-rehearsal}
VENV=${VENV:-$CACHE/gpu-rehearsal-venv}
BUILD_PYTHON=${BUILD_PYTHON:-python}
PYTHON_VERSION=${PYTHON_VERSION:-3.11}
# The GPU image's versions (docs/gpu.md); numpy 2.5 needs Python 3.12, so 2.4 stands in for it on 3.11.
IMAGE_PACKAGES=(torch==2.11.0 pytorch-lightning==2.6.6 torch-geometric==2.8.0 torchmetrics==1.9.0 "numpy>=2.4"
                pandas pyarrow pyyaml tqdm matplotlib networkx safetensors scipy scikit-learn pytest pytest-timeout
                "transformers>=5,<6" psutil)

mkdir -p "$WORK"
if [ ! -x "$VENV/bin/python" ]; then
    "python$PYTHON_VERSION" -m venv "$VENV"
    "$VENV/bin/python" -m pip install "${IMAGE_PACKAGES[@]}"
fi
if [ ! -f "$WORK/bundle/manifest.json" ] || [ ! -f "$WORK/bundle/data/moses_descriptors/raw/train.csv.gz" ]; then
    (cd "$REPO" && PYTHONPATH="$REPO" "$BUILD_PYTHON" bench/gpu/gpu_bundle.py --python-version "$PYTHON_VERSION" \
        --out "$WORK/bundle")
fi
stamp=$(date -u +%Y%m%d-%H%M%S)
site="$WORK/site-$stamp"
out="$WORK/out-$stamp"
installing=$(date +%s)
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WORK"/bundle/wheels/*.whl
echo "rehearsal: the bundle's wheels installed in $(( $(date +%s) - installing )) s"
cd "$REPO"
export PYTHONPATH="$site:$REPO" PYTHONUNBUFFERED=1
started=$(date +%s)
status=0
if [ "$MODE" = check ]; then
    # shellcheck disable=SC2086  # PARTS is a list of words
    "$VENV/bin/python" bench/gpu/gpu_check.py --device cpu --quick --steps 2 --time-scale "${TIME_SCALE:-6}" \
        --budget "${BUDGET:-14400}" ${PARTS:+--parts $PARTS} --bundle "$WORK/bundle" --out "$out" \
        --work "$WORK/work-$stamp" || status=$?
else
    "$VENV/bin/python" bench/gpu/gpu_pretrain.py --device cpu --budget "${BUDGET:-360}" --time-scale "${TIME_SCALE:-3}" \
        ${CORES:+--cores "$CORES"} --batch-size 32 --probe-per-core 50 --probe-steps 2 8 --bundle "$WORK/bundle" \
        --out "$out" --work "$WORK/work-$stamp" || status=$?
fi
echo "rehearsal: exit code $status after $(( $(date +%s) - started )) s; summary in $out/summary.md"
if [ "$MODE" = pretrain ] && [ -f "$out/pretrained/moses_rdkit2d.ckpt" ]; then
    # what comes back must be a drop-in for the shipped checkpoint: the small-data recipe fine-tunes from it
    tuned=0
    "$VENV/bin/python" train.py --config small_molecules --init_from "$out/pretrained/moses_rdkit2d.ckpt" \
        --trainer.max_epochs 1 --trainer.enable_progress_bar false --logger none \
        --data.root "$WORK/work-$stamp/finetune" --run_root "$WORK/work-$stamp/finetune_runs" || tuned=$?
    echo "rehearsal: one epoch of configs/small_molecules.yaml from $out/pretrained/moses_rdkit2d.ckpt: exit code $tuned"
    [ "$status" -ne 0 ] || status=$tuned
fi
exit "$status"
