#!/bin/bash
# Build .fleetwheels/ (ignored; carried to the device machine for device_run.sh phase 4): a Ray
# for the device's Python 3.12 without what fleet mode never loads (Java jars, RLlib, Tune,
# Serve, Data, Train), packed with xz to fit the device tool's 64 MiB carry limit, and the
# wheels of Ray's requirements the device image lacks (jsonschema and its own).
set -euo pipefail
RAY=${RAY:-2.60.0}
W=$(mktemp -d)
python3 -m pip download "ray==$RAY" --no-deps --python-version 3.12 --only-binary=:all: \
    --platform manylinux2014_x86_64 -d "$W" -q
mkdir -p "$W/x" .fleetwheels && (cd "$W/x" && unzip -q "$W"/ray-*.whl)
rm -rf "$W"/x/ray/{jars,rllib,tune,serve,data,train,workflow,tests,llm}
tar cf - -C "$W/x" . | xz -T0 -9e > .fleetwheels/ray-min.tar.xz
python3 -m pip download jsonschema --python-version 3.12 --only-binary=:all: \
    --platform manylinux2014_x86_64 -d "$W/deps" -q
cp "$W"/deps/{jsonschema,jsonschema_specifications,referencing,rpds_py}-*.whl .fleetwheels/
rm -rf "$W"
du -sh .fleetwheels
