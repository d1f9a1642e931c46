#!/usr/bin/env bash
# Build the sdist and the wheel, check them as PyPI would (twine check --strict), install the wheel
# into fresh venvs with no source tree on the path, and use it as a new user would. Bare (no extra,
# as `pip install picoflow-ai` gives it): the version, the flows, the README's first example, and
# one line naming the extra from each command that needs one. With the server: `picoflow serve`
# answering /readyz.
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

fresh_venv() {  # NAME REQUIREMENT: a new venv with only REQUIREMENT (and what it needs) installed
  python3 -m venv "$WORK/$1"
  "$WORK/$1/bin/pip" install --quiet --upgrade pip
  "$WORK/$1/bin/pip" install --quiet -c "$ROOT/constraints.txt" "$2"
}

# Without its extra, a command ends with one line naming it (no traceback) and a failing exit.
says_needs() {  # EXTRA COMMAND...
  local extra=$1 said
  shift
  if said=$("$@" 2>&1 </dev/null); then
    echo "\`$*\` ran without picoflow-ai[$extra]" >&2; exit 1
  fi
  if [ "$(printf '%s\n' "$said" | wc -l)" -ne 1 ] || [[ "$said" != *"picoflow-ai[$extra]"* ]]; then
    printf '`%s` without picoflow-ai[%s] must say so in one line; it said:\n%s\n' "$*" "$extra" "$said" >&2
    exit 1
  fi
}

fresh_venv bare "$WHEEL"
fresh_venv venv "$WHEEL[server,cli]"  # cli: empty now, kept so that old install lines still work

cd "$WORK"  # no source tree here, nor on the path
export PYTHONPATH= PICOFLOW_STORE=memory://

# `pip install picoflow-ai`, nothing more.
test "$(bare/bin/picoflow --version)" = "picoflow $VERSION"
bare/bin/python - <<'PY'
import importlib.metadata, pathlib, sys, picoflow, picoflow_demos
for module in (picoflow, picoflow_demos):
    assert pathlib.Path(module.__file__).is_relative_to(pathlib.Path("bare").resolve()), module.__file__
assert importlib.metadata.version("picoflow-ai") == picoflow.__version__
extras = {"fastapi", "uvicorn", "openai", "anthropic", "mcp", "temporalio", "psycopg", "xllamacpp"}
assert not extras & {name.partition(".")[0] for name in sys.modules}, "import picoflow loaded an extra"
for extra in extras:
    try:
        importlib.metadata.distribution(extra)
    except importlib.metadata.PackageNotFoundError:
        continue
    raise AssertionError(f"the bare install holds {extra}")
PY
bare/bin/picoflow flows > flows.out 2>&1 || { cat flows.out; exit 1; }
if ! grep -q "hotel" flows.out || grep -q Traceback flows.out; then cat flows.out; exit 1; fi
says_needs server bare/bin/picoflow serve
says_needs mcp bare/bin/picoflow mcp serve
says_needs temporal bare/bin/picoflow worker --temporal 127.0.0.1:7233
says_needs postgres bare/bin/picoflow sessions list --store postgresql://picoflow@127.0.0.1:1/none

# The README's first complete program, as a new user would paste it after `pip install picoflow-ai`.
bare/bin/python - "$ROOT/README.md" > first_example.py <<'PY'
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1], encoding="utf-8").read(), re.DOTALL)
print(next(block for block in blocks if "asyncio.run(main())" in block))
PY
bare/bin/python -W error first_example.py > first_example.out
test -s first_example.out

# With the server.
test "$(venv/bin/picoflow --version)" = "picoflow $VERSION"
venv/bin/picoflow flows | grep -q "hotel"

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
echo "wheel smoke test passed: $(basename "$WHEEL") (and its sdist) checked, installed bare and with the server, and served"
