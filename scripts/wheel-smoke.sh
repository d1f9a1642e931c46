#!/usr/bin/env bash
# Build the sdist and the wheel, check them as PyPI would (twine check --strict), install the wheel
# into a fresh venv with no source tree on the path, and use it as a new user would: the version,
# the flows, the README's first example, and `picoflow serve` answering /readyz.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
SERVER=
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$PY" -m build --no-isolation --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
"$PY" -m twine check --strict "$WORK"/dist/*
WHEEL=$(ls "$WORK"/dist/*.whl)
# The README PyPI shows links to the docs site and the repository, never to files it does not have.
"$PY" - "$WHEEL" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(wheel.read(name).decode() for name in wheel.namelist() if name.endswith("/METADATA"))
relative = sorted(set(re.findall(r"\]\((?!https?://|#)([^)]+)\)", metadata)))
assert not relative, f"relative links in the PyPI README: {relative}"
assert "](https://picoflow-ai.github.io/picoflow/getting-started/)" in metadata
PY
VERSION=$("$PY" -c 'import picoflow; print(picoflow.__version__)')
case "$(basename "$WHEEL")" in picoflow_ai-"$VERSION"-py3-none-any.whl) ;; *) echo "unexpected wheel $WHEEL" >&2; exit 1;; esac

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --upgrade pip
"$WORK/venv/bin/pip" install --quiet -c "$ROOT/constraints.txt" "$WHEEL[server,cli]"

cd "$WORK"  # no source tree here, nor on the path
export PYTHONPATH= PICOFLOW_STORE=memory://
test "$(venv/bin/picoflow --version)" = "picoflow $VERSION"
venv/bin/python - <<'PY'
import importlib.metadata, pathlib, picoflow, picoflow_demos
for module in (picoflow, picoflow_demos):
    assert pathlib.Path(module.__file__).is_relative_to(pathlib.Path("venv").resolve()), module.__file__
assert importlib.metadata.version("picoflow-ai") == picoflow.__version__
PY
venv/bin/picoflow flows | grep -q "hotel"

# The README's first complete program, as a new user would paste it.
venv/bin/python - "$ROOT/README.md" > first_example.py <<'PY'
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1], encoding="utf-8").read(), re.DOTALL)
print(next(block for block in blocks if "asyncio.run(main())" in block))
PY
venv/bin/python -W error first_example.py > first_example.out
test -s first_example.out

# `picoflow serve` on a scripted model, until /readyz answers 200.
echo '["Hello from the wheel."]' > replies.json
PORT=$(venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
venv/bin/picoflow serve --port "$PORT" --model scripted:replies.json --store memory:// --no-warm >serve.log 2>&1 &
SERVER=$!
for _ in $(seq 1 200); do
  if curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; then READY=1; break; fi
  kill -0 "$SERVER" 2>/dev/null || { cat serve.log; exit 1; }
  sleep 0.1
done
[ "${READY:-}" = 1 ] || { echo "picoflow serve never answered /readyz" >&2; cat serve.log; exit 1; }
echo "wheel smoke test passed: $(basename "$WHEEL") (and its sdist) checked, installed and served"
