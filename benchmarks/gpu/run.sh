#!/usr/bin/env bash
# Both GPU benchmarks in one go, on a machine with Python 3.12, PyTorch and a GPU but no network,
# from what prepare.sh built here: run.sh [OUT_DIR] (default: a new folder under /tmp).
# Writes gpu-triton.json, gpu-e2e.json and their logs into OUT_DIR. WORKERS (default 4): sluice
# serve's worker processes in the end-to-end case; E2E_ONLY=1 skips bench_gpu_triton.py.
set -u
cd "$(dirname "$0")"
out=${1:-$(mktemp -d /tmp/gpu-bench-XXXX)}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -V
site=$(mktemp -d /tmp/gpu-site-XXXX)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" build/whl/*.whl \
  build/sluice-whl/*.whl 2>&1 | grep -v WARNING
triton=$(mktemp -d /tmp/gpu-triton-XXXX)
tar -C "$triton" -xJf build/triton.tar.xz
export PYTHONPATH=$site
PYTHONPATH=$site:../../functions python3 -c "import sluice.api.app, sluice.wiring, tritonclient.http.aio" || exit 1
if [ -z "${E2E_ONLY:-}" ]; then
  timeout 240 python3 bench_gpu_triton.py --triton-root "$triton/triton" \
    --stub-pythonpath "$triton/triton/np1" --duration 8 --out "$out/gpu-triton.json" >"$out/triton.log" 2>&1
  echo "bench_gpu_triton: exit $?"
fi
timeout 300 python3 bench_gpu_e2e.py --triton-root "$triton/triton" \
  --stub-pythonpath "$triton/triton/np1" --workers "${WORKERS:-4}" --out "$out/gpu-e2e.json" >"$out/e2e.log" 2>&1
echo "bench_gpu_e2e: exit $?"
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
for name in ("gpu-triton.json", "gpu-e2e.json"):
    path = Path(sys.argv[1]) / name
    if not path.exists():
        print(name, "missing")
        continue
    report = json.loads(path.read_text())
    print(name, "error:", report.get("error"))
    for concurrency, entry in report.get("latency", {}).items():
        print(" ", concurrency, {k: v for k, v in entry.items() if k != "rounds"})
PY
echo "results in $out"
