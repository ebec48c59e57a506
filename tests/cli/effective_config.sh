#!/usr/bin/env bash
# A run's config.effective.toml runs again and a refused run touches nothing (docs/configuration.md):
#  1. config.effective.toml is valid TOML (Python's tomllib reads it) of every value type — a data.path list of two
#     files whose names hold a space, a quote and a backslash, floats, bools, ints, strings;
#  2. roundpipe_train --config <that file> (another output.dir) writes the same effective config, value for value,
#     and the same losses, bitwise;
#  3. it is self-consistent: a --set optim.staleness = 2 over the file's optim.mode = "sync" is written as
#     mode "async", staleness 2, never both as given;
#  4. what was set, not what it derived: defaults are comments, paths absolute (it runs from anywhere, and a
#     changed optim.mode alone takes effect);
#  5. a run refused because its checkpoint.dir holds another run's checkpoints (exit 2, "nothing was deleted")
#     leaves every byte of that run's directory as it was.
# Usage: effective_config.sh <bin dir> <fixtures dir>
set -uo pipefail
bin="$1" fixtures="$2"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found (set RP_FIXTURES_DIR)"; exit 77; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export RP_NUM_THREADS=1

# Two data files with the characters a TOML string must escape in their names.
a="$work/da\"ta one.txt" b="$work/back\\slash.txt"
head -c 20000 "$fixtures/text/tinystories_sample.txt" >"$a"
tail -c 20000 "$fixtures/text/tinystories_sample.txt" >"$b"
python3 - "$work/run.toml" "$model" "$a" "$b" <<'PY'
import json, sys
path, model, a, b = sys.argv[1:]
q = json.dumps  # a JSON string is a valid TOML basic string for these names
open(path, "w").write(f"""[model]
path = {q(model)}
[data]
path = [{q(a)}, {q(b)}]
[train]
seq_len = 32
global_batch = 4
max_steps = 3
[optim]
mode = "sync"
lr = 3e-4
[checkpoint]
every = 3
async = false
""")
PY
"$bin/roundpipe_train" --config "$work/run.toml" --set "output.dir=$work/first" --set optim.weight_decay=0.05 \
  >"$work/first.log" 2>&1 || { cat "$work/first.log"; fail "the first run"; }
"$bin/roundpipe_train" --config "$work/first/config.effective.toml" --set "output.dir=$work/again" \
  >"$work/again.log" 2>&1 || { cat "$work/again.log"; fail "the run from config.effective.toml"; }
python3 - "$work" "$a" "$b" <<'PY' || fail "the effective configs"
import json, sys, tomllib
work, a, b = sys.argv[1:]
def effective(run):
    with open(f"{work}/{run}/config.effective.toml", "rb") as f:
        flat = {}
        def walk(prefix, table):
            for k, v in table.items():
                if isinstance(v, dict): walk(f"{prefix}{k}.", v)
                else: flat[prefix + k] = v
        walk("", tomllib.load(f))
        return flat
first, again = effective("first"), effective("again")
assert first["data.path"] == [a, b], first["data.path"]
assert first["optim.weight_decay"] == 0.05 and first["optim.lr"] == 3e-4, first
assert {type(v) for v in first.values()} >= {str, int, float, bool, list}, {type(v) for v in first.values()}
differ = {k for k in first.keys() | again.keys() if first.get(k) != again.get(k)}
assert differ == {"output.dir"}, {k: (first.get(k), again.get(k)) for k in differ}
losses = lambda run: [json.loads(l)["loss"] for l in open(f"{work}/{run}/metrics.jsonl")]
assert losses("first") == losses("again") and len(losses("first")) == 3, (losses("first"), losses("again"))
print(f"ok: config.effective.toml ({len(first)} keys) is valid TOML and runs again: the same values and losses")
PY

# What was set, not what it derived: keys left at their defaults are comments (so only optim.mode = "async" over the
# file makes an async run; a pinned optim.staleness = 0 refused it), and paths are absolute (the file runs from any
# directory; a relative model.path worked only from the first run's).
mkdir -p "$work/elsewhere" "$work/rel"
ln -s "$model" "$work/rel/model"
cp "$a" "$work/rel/data.txt"
(cd "$work/rel" && "$bin/roundpipe_train" --config /dev/null --set model.path=model --set data.path=data.txt \
  --set train.seq_len=32 --set train.global_batch=4 --set train.max_steps=1 \
  --set checkpoint.every=0 --set checkpoint.at_end=false >"$work/rel.log" 2>&1) || { cat "$work/rel.log"; fail "the relative run"; }
grep -q "^output.dir = \"$work/rel/out\"  # default \"out\"$" "$work/rel/out/config.effective.toml" ||
  fail "the default output.dir is not absolute: $(grep output.dir "$work/rel/out/config.effective.toml")"
grep -q '^# optim.staleness = 1  # default; this run: 0$' "$work/rel/out/config.effective.toml" ||
  fail "optim.staleness is not a comment with what this run derived: $(grep staleness "$work/rel/out/config.effective.toml")"
grep -q "^model.path = \"$work/rel/model\"  # --set \"model\"$" "$work/rel/out/config.effective.toml" ||
  fail "model.path is not absolute: $(grep model.path "$work/rel/out/config.effective.toml")"
(cd "$work/elsewhere" && "$bin/roundpipe_train" --config "$work/rel/out/config.effective.toml" --set optim.mode=async \
  --set "output.dir=$work/elsewhere/out" >"$work/elsewhere.log" 2>&1) ||
  { cat "$work/elsewhere.log"; fail "the effective config with only optim.mode = \"async\" changed, from another directory"; }
grep -q "optim.mode = \"async\"" "$work/elsewhere/out/config.effective.toml" || fail "the re-run is not async"
# A model.path that is not there is named, with where it was set and where it was looked for.
(cd "$work/elsewhere" && "$bin/roundpipe_train" --config /dev/null --set model.path=model --set data.path=x.txt \
  >"$work/nomodel.log" 2>&1)
[[ $? -eq 2 ]] && grep -q -- "--set: model.path = \"model\" ($work/elsewhere/model): no Hugging Face config.json there" \
  "$work/nomodel.log" || { cat "$work/nomodel.log"; fail "a missing model.path is not named"; }
echo "ok: defaults are comments, paths absolute: only optim.mode changed runs async from another directory"

# Self-consistent: the resolved mode and staleness, not the file's mode beside --set's staleness.
"$bin/roundpipe_train" --config "$work/run.toml" --set "output.dir=$work/stale" --set optim.staleness=2 \
  --set train.max_steps=1 --set checkpoint.every=0 >"$work/stale.log" 2>&1 || { cat "$work/stale.log"; fail "the stale run"; }
python3 - "$work/stale/config.effective.toml" <<'PY' || fail "the resolved mode"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))["optim"]
assert (c["mode"], c["staleness"]) == ("async", 2), c
print("ok: --set optim.staleness = 2 over optim.mode = \"sync\" is written as mode \"async\", staleness 2")
PY

# What wrote a run: the log's first line and every checkpoint manifest carry roundpipe_train --version's line.
version=$("$bin/roundpipe_train" --version) || fail "--version"
first_line=$(grep -m1 '' "$work/first.log")
[[ "$first_line" == *" r0 I] $version" ]] || fail "the log's first line is not the version ($version): $first_line"
python3 - "$work/first/checkpoints" "$version" <<'PY' || fail "a manifest without the version"
import glob, json, sys
manifests = glob.glob(f"{sys.argv[1]}/step-*/manifest.json")
assert manifests and all(json.load(open(m))["written_by"] == sys.argv[2] for m in manifests), manifests
print(f"ok: the log's first line and {len(manifests)} manifest(s) name {sys.argv[2]}")
PY

# --print-config: the effective config on stdout, a file that runs (as config.effective.toml's lines).
"$bin/roundpipe_train" --config "$work/run.toml" --set "output.dir=$work/printed" --set optim.weight_decay=0.05 \
  --print-config >"$work/printed.toml" \
  2>"$work/printed.log" || { cat "$work/printed.log"; fail "--print-config failed"; }
python3 - "$work/printed.toml" "$work/first/config.effective.toml" <<'PY' || fail "--print-config's stdout"
import sys, tomllib
printed, effective = (tomllib.load(open(p, "rb")) for p in sys.argv[1:])
flat = lambda t, p="": {k2: v2 for k, v in t.items() for k2, v2 in (flat(v, p + k + ".").items() if isinstance(v, dict) else [(p + k, v)])}
a, b = flat(printed), flat(effective)
differ = {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
assert set(differ) == {"output.dir"}, differ
print(f"ok: --print-config prints {len(a)} keys on stdout, config.effective.toml's values")
PY

# A refused run changes nothing of the run it refused to touch.
snapshot() { (cd "$work/first" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before="$(snapshot)"
"$bin/roundpipe_train" --config "$work/run.toml" --set "output.dir=$work/first" --set train.max_steps=1 \
  --set checkpoint.every=0 >"$work/refused.log" 2>&1
code=$?
[[ $code -eq 2 ]] || { cat "$work/refused.log"; fail "a run into another run's checkpoints exited $code, expected 2"; }
grep -q "nothing was deleted" "$work/refused.log" || { cat "$work/refused.log"; fail "no refusal message"; }
grep -q "trainable parameters\|dataset: " "$work/refused.log" && { cat "$work/refused.log"; fail "refused only after the model and data loaded"; }
[[ "$(snapshot)" == "$before" ]] || fail "the refused run changed $work/first: $(diff <(echo "$before") <(snapshot))"
echo "ok: the refused run left every byte of the earlier run's directory as it was"
