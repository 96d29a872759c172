#!/usr/bin/env bash
# What one lease of a GPU machine runs, from the project root there (the bundle travels in
# build-bundle/): scripts/bench.sh's default set as the new reference run, then
# scripts/gpu_check.sh in the time left. Usage: bash build-bundle/lease.sh LIMIT_SECONDS
set -u
t0=$SECONDS
limit=${1:-580}
echo "lease.sh: $(date -u +%FT%TZ) on $(hostname -s), limit $limit s"
tar xzf build-bundle/bundle.tgz -C /tmp || { echo "lease.sh: the bundle did not unpack"; exit 1; }
echo "bundle: $(cat /tmp/tb/VERSION)"
nvidia-smi -L; echo "cores: $(nproc)"; python3 --version
stamp=$(date -u +%Y%m%dT%H%M%SZ)
ref=/tmp/ref
mkdir -p "$ref"
TB_BIN=/tmp/tb/bin/trainbench TB_CSV=$ref/default-$stamp.csv TB_REFERENCE=none PYTHONUNBUFFERED=1 \
  timeout -k 5 170 /tmp/tb/scripts/bench.sh >"$ref/default-$stamp-log.txt" 2>&1
echo "bench.sh: exit status $? after $((SECONDS - t0)) s"
tail -4 "$ref/default-$stamp-log.txt"
tar czf "$OUT/reference-$stamp.tgz" -C "$ref" .
left=$((limit - (SECONDS - t0) - 10))
steps=1,2a,2b,3,4,5a,5b,5c,6,7
[ "$left" -ge 470 ] || steps=1,2a,2b,4,5a,5b,5c,6,7  # the reference run above is the default set
echo "gpu_check.sh: budget $left s, steps $steps"
/tmp/tb/run.sh check --out /tmp/check --budget "$left" --steps "$steps" >"$OUT/check-console.txt" 2>&1
echo "gpu_check.sh: exit status $? after $((SECONDS - t0)) s"
cp /tmp/check/*.tar.gz "$OUT/" 2>/dev/null
cat /tmp/check/check-*/check.md 2>/dev/null | head -40
