#!/usr/bin/env bash
# Builds benchmarks/gpu/build/ (ignored by git: `build/`): what a GPU machine with Python 3.12 and
# PyTorch, but no network, needs to run bench_gpu_triton.py and bench_gpu_e2e.py. About 56 MB, so
# that it and the repository fit in 64 MiB. Needs the repo's .venv-triton (make triton-env) and a local libpython3.12.so.1.0
# (fallback for a machine whose Python has no shared library; LIBPYTHON=... to choose).
set -euo pipefail
cd "$(dirname "$0")"
site=../../.venv-triton/lib/python3.11/site-packages
libpython=${LIBPYTHON:-$(ls /root/.pyenv/versions/3.12.*/lib/libpython3.12.so.1.0 | head -1)}
rm -rf build && mkdir -p build/whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d build/whl \
  tritonclient==2.73.0 geventhttpclient==2.6.1 gevent==26.9.0 'greenlet<3.4' zope.event zope.interface \
  python-rapidjson brotli
# sluice's own runtime dependencies that a PyTorch image usually lacks (it has numpy, onnxruntime,
# aiohttp, grpcio, prometheus-client, uvloop): for `sluice serve` in bench_gpu_e2e.py.
mkdir -p build/sluice-whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
  -d build/sluice-whl fastapi starlette pydantic pydantic-core pydantic-settings python-dotenv \
  typing-inspection annotated-types mangum orjson aws-lambda-powertools jmespath cachetools cronsim \
  tzdata uvicorn httptools limits deprecated websockets annotated-doc opentelemetry-api importlib-metadata
pack=$(mktemp -d)
mkdir -p "$pack/triton/pytriton/tritonserver/python_backend_stubs" "$pack/triton/libpython" "$pack/triton/nvidia_pytriton.libs"
cp -a "$site/pytriton/tritonserver/"{bin,backends,caches} "$pack/triton/pytriton/tritonserver/"
cp -a "$site/pytriton/tritonserver/python_backend_stubs/3.12" "$pack/triton/pytriton/tritonserver/python_backend_stubs/"
cp -a "$site/nvidia_pytriton.libs/"* "$pack/triton/nvidia_pytriton.libs/"
rm "$pack/triton/nvidia_pytriton.libs/"libpython3-*   # the wheel's own 3.13 libpython: not needed
cp "$libpython" "$pack/triton/libpython/"
# numpy 1.26 for the backend stub (it needs numpy < 2), unpacked: xz packs it to half its wheel.
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$pack" numpy==1.26.4
mkdir -p "$pack/triton/np1" && (cd "$pack/triton/np1" && unzip -q "$pack"/numpy-1.26.4-*.whl)
rm "$pack"/numpy-1.26.4-*.whl
tar -C "$pack" -cf - triton | xz -T0 -6 > build/triton.tar.xz
rm -rf "$pack"
du -sh build
