#!/usr/bin/env bash
# Builds benchmarks/gpu/build/ (ignored by git: `build/`): what a GPU machine with Python 3.12 and
# PyTorch, but no network, needs to run bench_gpu_triton.py. About 59 MB, under the 64 MiB a device
# run may carry. Needs the repo's .venv-triton (make triton-env) and a local libpython3.12.so.1.0
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
  python-rapidjson brotli numpy==1.26.4
pack=$(mktemp -d)
mkdir -p "$pack/triton/pytriton/tritonserver/python_backend_stubs" "$pack/triton/libpython" "$pack/triton/nvidia_pytriton.libs"
cp -a "$site/pytriton/tritonserver/"{bin,backends,caches} "$pack/triton/pytriton/tritonserver/"
cp -a "$site/pytriton/tritonserver/python_backend_stubs/3.12" "$pack/triton/pytriton/tritonserver/python_backend_stubs/"
cp -a "$site/nvidia_pytriton.libs/"* "$pack/triton/nvidia_pytriton.libs/"
rm "$pack/triton/nvidia_pytriton.libs/"libpython3-*   # the wheel's own 3.13 libpython: not needed
cp "$libpython" "$pack/triton/libpython/"
tar -C "$pack" -cf - triton | xz -T0 -6 > build/triton.tar.xz
rm -rf "$pack"
du -sh build
