#!/usr/bin/env bash
# make wheels: every requirement of the project but torch, with its dependencies, as wheels in
# $WHEELS (default wheels/), for the GPU machine's python ($PYVER, default 3.12) and platform
# ($PLATFORM, default x86_64), plus a pip wheel. Needs a package registry; carry the folder to the
# machine that has none, where tools/gpu_check.sh installs from it with --no-index.
#
# A requirement published only as a source archive (omegaconf's antlr4-python3-runtime) is built
# here into a pure-Python wheel first; every other file is a binary wheel for the target.
# REQUIREMENTS=FILE takes the requirement lines of FILE instead (tools/requirements-check.txt: only
# what the GPU check imports, a third of the size).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-python3}"
WHEELS="${WHEELS:-wheels}"
PYVER="${PYVER:-3.12}"
PLATFORM="${PLATFORM:-x86_64}"
SDIST_ONLY="${SDIST_ONLY:-antlr4-python3-runtime==4.9.3}"
mkdir -p "$WHEELS"

REQ_ARGS=()
if [ -n "${REQUIREMENTS:-}" ]; then REQ_ARGS=(--requirements "$REQUIREMENTS"); fi
REQS=$("$PY" tools/preflight.py --list-requirements "${REQ_ARGS[@]}")
echo "[wheels] requirements (torch excluded): $REQS"
# shellcheck disable=SC2086
if [ -z "${REQUIREMENTS:-}" ]; then "$PY" -m pip wheel -q --no-deps -w "$WHEELS" $SDIST_ONLY; fi
PLATFORMS=()
for tag in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1 linux; do
    PLATFORMS+=(--platform "${tag}_${PLATFORM}")
done
# shellcheck disable=SC2086
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp "${PLATFORMS[@]}" \
    --find-links "$WHEELS" -d "$WHEELS" pip $REQS
echo "[wheels] $(ls "$WHEELS"/*.whl | wc -l) wheels in $WHEELS/ ($(du -sh "$WHEELS" | cut -f1)) for python $PYVER on $PLATFORM"
