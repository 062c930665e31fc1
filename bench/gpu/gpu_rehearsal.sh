#!/usr/bin/env bash
# Rehearse the GPU check on this machine, as the lent GPU machine will run it (docs/gpu.md, "Rehearsed on a CPU"):
# a fresh virtual environment with the GPU image's versions and nothing of this project's, the bundle's wheels
# installed into it with --no-index (for this Python: 3.11 here, 3.12 there), then bench/gpu/gpu_check.py with
# --device cpu, small sizes and caps times TIME_SCALE. Run from anywhere:
#
#     bash bench/gpu/gpu_rehearsal.sh
#
# WORK (default ~/.cache/graphormer-urpe/gpu-rehearsal) holds the bundle, the installed wheels and one out-<time>/
# and work-<time>/ per rehearsal (earlier ones are kept); VENV (default ~/.cache/graphormer-urpe/gpu-rehearsal-venv)
# is created with the image's packages when it does not exist (a few GB: torch's CUDA build imports only with its
# nvidia-* wheels). BUILD_PYTHON (default: python, this project's environment) builds the bundle's data, which needs
# qm9pack and RDKit; the bundle is built once (delete WORK/bundle to rebuild it). PARTS (default: the check's own)
# and BUDGET (seconds, default 14400: a CPU compiles slowly) are passed on. Exit code: the check's.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/graphormer-urpe
WORK=${WORK:-$CACHE/gpu-rehearsal}
VENV=${VENV:-$CACHE/gpu-rehearsal-venv}
BUDGET=${BUDGET:-14400}
BUILD_PYTHON=${BUILD_PYTHON:-python}
TIME_SCALE=${TIME_SCALE:-6}
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
if [ ! -f "$WORK/bundle/manifest.json" ]; then
    (cd "$REPO" && PYTHONPATH="$REPO" "$BUILD_PYTHON" bench/gpu/gpu_bundle.py --python-version "$PYTHON_VERSION" \
        --out "$WORK/bundle")
fi
stamp=$(date -u +%Y%m%d-%H%M%S)
site="$WORK/site-$stamp"
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WORK"/bundle/wheels/*.whl
cd "$REPO"
started=$(date +%s)
status=0
# shellcheck disable=SC2086  # PARTS is a list of words
PYTHONPATH="$site:$REPO" PYTHONUNBUFFERED=1 "$VENV/bin/python" bench/gpu/gpu_check.py --device cpu --quick --steps 2 \
    --time-scale "$TIME_SCALE" --budget "$BUDGET" ${PARTS:+--parts $PARTS} --bundle "$WORK/bundle" \
    --out "$WORK/out-$stamp" --work "$WORK/work-$stamp" || status=$?
echo "rehearsal: exit code $status after $(( $(date +%s) - started )) s; summary in $WORK/out-$stamp/summary.md"
exit "$status"
