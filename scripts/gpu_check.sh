#!/usr/bin/env bash
# make gpu-check: one command for a CUDA machine, under ten minutes.
#
#   1. creates or uses a venv ($GPU_CHECK_VENV, default .venv) and installs the project into it
#      (on a CUDA machine `pip install -e .` takes the pinned torch==2.13.0 from PyPI, a CUDA build);
#   2. freezes the polygon protocol into a temporary results dir (GPU_CHECK_BASE_STEPS=N shrinks the
#      base warm-up through a temporary copy of the protocol; the output says so);
#   3. profiles one round of each arm and reports the stage table, decode bytes/s, training FLOP/s
#      as a fraction of the device's peak, and the projected wall time of the full experiment
#      (JSON in $GPU_CHECK_OUT, default results/bench/gpu_check.json).
#
# GPU_CHECK_TINY=1 runs the same steps on the tests' tiny protocol, on CPU if there is no GPU.
# GPU_CHECK_DEVICE=auto|cpu|cuda[:k] picks the device (auto: CUDA when torch sees one).
# GPU_CHECK_TIMEOUT (seconds, default 600) bounds the check itself.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${GPU_CHECK_VENV:-.venv}"
PY="${PY:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[gpu-check] creating $VENV"
    "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.version('selfplay-harness')" >/dev/null 2>&1; then
    echo "[gpu-check] installing the project into $VENV (pip install -e '.[dev]')"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e '.[dev]'
fi

TORCH_INFO=$("$VENV/bin/python" -c "import torch; print(torch.__version__, torch.version.cuda or 'none', int(torch.cuda.is_available()))")
read -r TORCH_VERSION TORCH_CUDA CUDA_OK <<<"$TORCH_INFO"
echo "[gpu-check] torch $TORCH_VERSION (CUDA build: $TORCH_CUDA), CUDA available: $CUDA_OK"
if [ "$CUDA_OK" != "1" ] && [ "${GPU_CHECK_TINY:-0}" != "1" ] && [ "${GPU_CHECK_DEVICE:-auto}" != "cpu" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "[gpu-check] error: this machine has a GPU but torch $TORCH_VERSION in $VENV cannot use it (a CPU build?)." >&2
        echo "[gpu-check] run GPU_CHECK_VENV=.venv-gpu make gpu-check: a fresh venv whose pip install -e . takes" >&2
        echo "[gpu-check] the CUDA build of torch==2.13.0 from PyPI." >&2
    else
        echo "[gpu-check] error: no CUDA device visible. GPU_CHECK_TINY=1 checks the script on CPU;" >&2
        echo "[gpu-check] GPU_CHECK_DEVICE=cpu profiles polygon on CPU (slow)." >&2
    fi
    exit 1
fi

exec timeout --signal=TERM --kill-after=10 "${GPU_CHECK_TIMEOUT:-600}" \
    "$VENV/bin/python" -m harness.profile gpu-check "$@"
