#!/usr/bin/env bash
# Checks that the docs name only things that exist:
#   - every NCCL_* / OXCCL_* variable that README.md or docs/CONFIG.md names is a knob of
#     bootstrap/src/config.rs (its KNOBS table, read from the source), a launcher variable
#     that file accepts (LAUNCHER_VARS), or under the reserved OXCCL_TEST_ prefix;
#   - every file or folder that README.md or a page under docs/ names (a markdown link, or a
#     path starting with one of the repository's top-level folders; `*` globs must match
#     something) exists.
# Exits non-zero, listing each problem with its file and line. scripts/test.sh runs it.
#   scripts/check-docs.sh [ROOT]     (default: this repository)
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
exec python3 - "$root" <<'EOF'
import glob
import os, re, subprocess, sys

root = sys.argv[1]
def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()

# The knob table, from its source: `pub static KNOBS: &[Knob] = &[ ... ];` and its names.
config = read("bootstrap/src/config.rs")
table = re.search(r"pub static KNOBS: &\[Knob\] = &\[(.*?)\n\];", config, re.S)
if not table:
    sys.exit("check-docs: no `pub static KNOBS: &[Knob] = &[ ... ];` in bootstrap/src/config.rs: update this script")
knobs = set(re.findall(r'\bname: "([A-Z0-9_]+)"', table.group(1)))
launcher = re.search(r"const LAUNCHER_VARS: &\[&str\] = &\[(.*?)\];", config, re.S)
launcher_vars = set(re.findall(r'"([A-Z0-9_]+)"', launcher.group(1))) if launcher else set()
if len(knobs) < 10:
    sys.exit(f"check-docs: read only {len(knobs)} knobs from bootstrap/src/config.rs: update this script")
reserved_prefixes = ("OXCCL_TEST_",)
known = knobs | launcher_vars

problems = []
variable = re.compile(r"\b((?:NCCL|OXCCL)_[A-Z0-9_]*)(\*?)")

def check_variables(path):
    for number, line in enumerate(read(path).splitlines(), 1):
        for name, star in variable.findall(line):
            if star or name.endswith("_"):
                ok = any(k.startswith(name) for k in known) or name.startswith(reserved_prefixes)
            else:
                ok = name in known or name.startswith(reserved_prefixes)
            if not ok:
                problems.append(f"{path}:{number}: {name}{star} is not a knob of bootstrap/src/config.rs (KNOBS) nor a launcher variable")

check_variables("README.md")
check_variables("docs/CONFIG.md")

# Paths: markdown links (relative to the page) and paths under a top-level folder of the
# repository (relative to the root), in README.md and every page under docs/.
# Folders git ignores (target/, gpu-bin/, ...) exist only where something was built: a
# page's name under one is checked as on a fresh checkout, where it is not a path at all.
def ignored(d):
    return subprocess.run(["git", "-C", root, "check-ignore", "-q", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

top = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".") and not ignored(d))
top_files = sorted(f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f)) and not f.startswith("."))
bare = re.compile(r"(?<![\w./@:-])((?:" + "|".join(map(re.escape, top)) + r")/[\w./*+<>-]*)")
link = re.compile(r"\]\(([^)\s]+)\)")

def exists(base, target):
    target = target.split("#")[0]
    if not target or re.match(r"^[a-z]+:", target):
        return True  # an anchor or a URL
    if "<" in target:
        return True  # a placeholder such as docs/results/<date>-<machine>/
    full = os.path.normpath(os.path.join(base, target))
    return bool(glob.glob(full)) if "*" in target else os.path.exists(full)

checked = 0
pages = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
for page in pages:
    in_code = False
    for number, line in enumerate(read(page).splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        for target in link.findall(line):
            checked += 1
            if not exists(os.path.join(root, os.path.dirname(page)), target):
                problems.append(f"{page}:{number}: link to {target}, which does not exist")
        for target in bare.findall(line):
            target = target.rstrip(".,;:")
            # Inside code blocks only names that are clearly files (a slash and a dot) count.
            if in_code and "." not in os.path.basename(target):
                continue
            checked += 1
            if not exists(root, target):
                problems.append(f"{page}:{number}: names {target}, which does not exist")

for problem in problems:
    print(problem)
if problems:
    sys.exit(f"check-docs: {len(problems)} problem(s)")
print(f"check-docs: README.md and docs/CONFIG.md name only known settings ({len(knobs)} knobs); {checked} files and links named in {len(pages)} pages exist")
EOF
