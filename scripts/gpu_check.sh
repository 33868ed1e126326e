#!/usr/bin/env bash
# One short, prepared command for a machine with a CUDA GPU (under 8 minutes on one GPU).
# Writes outputs/benchmarks/gpu.json; see lessonlib/bench/gpu.py for what it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt
PYTHONUNBUFFERED=1 python -m lessonlib.bench gpu "$@"
