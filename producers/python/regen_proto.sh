#!/usr/bin/env bash
# Regenerates src/outboxd_producer/envelope_pb2.py and envelope_pb2.pyi from the shared
# proto/outbox/v1/envelope.proto with grpcio-tools' protoc (a development-time step: commit both
# files). The pinned grpcio-tools decides the gencode version (1.72.1: libprotoc 30.0, protobuf
# Python gencode 6.30.0), which sets the lower bound of pyproject.toml's protobuf range: change both
# together. Installs grpcio-tools into a throwaway virtualenv; needs PyPI.
#
#   producers/python/regen_proto.sh
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.72.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "grpcio-tools==$GRPCIO_TOOLS_VERSION"
mkdir "$work/out"
"$work/venv/bin/python" -m grpc_tools.protoc -I "$repo/proto" \
  --python_out="$work/out" --pyi_out="$work/out" outbox/v1/envelope.proto
cp "$work/out/outbox/v1/envelope_pb2.py" "$work/out/outbox/v1/envelope_pb2.pyi" \
  "$here/src/outboxd_producer/"
echo "regenerated src/outboxd_producer/envelope_pb2.py{,i} ($("$work/venv/bin/python" -m grpc_tools.protoc --version))"
