#!/usr/bin/env bash
# make gpu-check: one prepared command for a CUDA machine that reaches no package registry.
#
#   1. preflight (tools/preflight.py, standard library only): the machine's own python3 and torch
#      (whatever version), a CUDA device, and a carried wheel for every requirement that python3
#      cannot already import; one line per missing piece, then stop;
#   2. installs only the carried wheels: pip install --no-index --find-links $WHEELS --target $SITE
#      (nothing else is fetched; $SITE goes first on PYTHONPATH, the machine's torch stays);
#   3. runs python -m tools.gpu_check with the arguments given here (--tiny, --device, --base-steps N,
#      --out PATH; see tools/gpu_check.py), under a timeout, and writes one JSON file.
#
# Settings (environment): PY (default python3), WHEELS (default wheels/, made by `make wheels`),
# SITE (default .gpu-check-site/), GPU_CHECK_TIMEOUT (seconds, default 600), GPU_CHECK_REQUIREMENTS
# (a requirements file instead of pyproject's dependencies, e.g. tools/requirements-check.txt).
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-python3}"
WHEELS="${WHEELS:-wheels}"
SITE="${SITE:-.gpu-check-site}"
say() { echo "[gpu-check] $*"; }

if ! command -v "$PY" >/dev/null 2>&1; then
    say "missing: python: '$PY' is not on PATH (set PY=/path/to/python3)" >&2
    exit 1
fi
CPU_OK=()
for arg in "$@"; do
    case "$arg" in --tiny|--device=cpu|cpu) CPU_OK=(--cpu-ok) ;; esac
done
REQ_ARGS=()
if [ -n "${GPU_CHECK_REQUIREMENTS:-}" ]; then REQ_ARGS=(--requirements "$GPU_CHECK_REQUIREMENTS"); fi

# 1. preflight: everything missing, one line each, before anything is installed
if ! TODO=$("$PY" tools/preflight.py --wheels "$WHEELS" "${CPU_OK[@]}" "${REQ_ARGS[@]}"); then
    say "stopped: the pieces above are missing" >&2
    exit 1
fi
TODO=$(echo "$TODO" | tail -n 1)

# 2. the carried wheels, no index
if [ -n "$TODO" ]; then
    say "installing from $WHEELS/ into $SITE/ (no index): $TODO"
    PIP=("$PY" -m pip)
    if ! "$PY" -c "import pip" >/dev/null 2>&1; then
        PIP=("$PY" "$(ls "$WHEELS"/pip-*.whl | head -n 1)/pip")  # a pip wheel runs as a zip application
    fi
    LOG=$(mktemp)
    # shellcheck disable=SC2086  # TODO is a space-separated list of requirements
    if ! "${PIP[@]}" install --isolated --no-index --find-links "$WHEELS" --target "$SITE" --upgrade $TODO >"$LOG" 2>&1; then
        grep -E "No matching distribution found for|Could not find a version|requires a different Python|is not a supported wheel" "$LOG" \
            | sed -E 's/^ERROR: //' | sort -u | while read -r line; do say "missing: $line (not among the carried wheels)" >&2; done
        say "stopped: pip could not install from $WHEELS/ (full log: $LOG)" >&2
        exit 1
    fi
    rm -f "$LOG"
fi
case "$SITE" in /*) ;; *) SITE="$PWD/$SITE" ;; esac
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" tools/preflight.py --imports "${REQ_ARGS[@]}"; then
    say "stopped: installed, but the pieces above do not import" >&2
    exit 1
fi
if [ "${GPU_CHECK_INSTALL_ONLY:-0}" = "1" ]; then
    say "installed: every requirement imports"
    exit 0
fi

# 3. the check itself
exec timeout --signal=TERM --kill-after=10 "${GPU_CHECK_TIMEOUT:-600}" "$PY" -m tools.gpu_check "$@"
