#!/usr/bin/env python3
"""Run the documentation's runnable examples as written, and check its quoted sources.

Fenced blocks in README.md, docs/*.md and python/README.md are checked by their info string:
  ```sh runnable       run with bash (-e -o pipefail) in a scratch copy of the source tree,
                       where build/release is the build under test;
  ```python runnable   run with python3, the binding from python/ and the library under test;
  ```LANG runnable chain  (sh or python) the chain blocks of one file and language run as one
                       program, in the order of the file, after its other blocks, so that a
                       tutorial's blocks may use what the blocks before them defined. Each
                       block keeps its own line numbers in the program, so an error's line
                       number is the Markdown file's;
  ```c file=PATH       must appear verbatim in PATH, so quoted code cannot drift from the
                       program that the tests build and run.
Blocks without these markers (long jobs such as tools/compare.sh, installation commands) are
shown only. Exit status: 0 all passed, 1 a failure, 77 (ctest's skip) when the Fashion-MNIST
files that the examples train on are missing.

usage: check_doc_commands.py SOURCE_DIR BUILD_DIR
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w+)\s*(.*)$")
TIMEOUT_S = 600


def blocks(path):
    """Yield (line number, language, attributes, text) of each fenced block in a Markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            start, lang, attrs = i + 1, m.group(1), m.group(2).split()
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            yield start, lang, attrs, "\n".join(lines[i + 1:j]) + "\n"
            i = j
        i += 1


def chain_program(parts):
    """One program from (line number, text) blocks: each block's text starts at its own line,
    blank lines elsewhere, so that line numbers in a traceback are those of the Markdown file."""
    lines = []
    for start, text in parts:
        lines += [""] * (start - len(lines))
        lines += text.rstrip("\n").split("\n")
    return "\n".join(lines) + "\n"


def run_block(where, lang, text, src, build, env, name):
    """Run one program in a fresh scratch tree; print the result; return True when it passed."""
    root = scratch_tree(src, build)
    try:
        # The program is written into the scratch tree's root (never into a folder that
        # links to the checkout) under a name that says which file it came from.
        path = os.path.join(root, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        if lang == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", path]
        else:
            cmd = [sys.executable, path]
        try:
            r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                               timeout=TIMEOUT_S)
            ok = r.returncode == 0
            detail = f"exit {r.returncode}"
        except subprocess.TimeoutExpired as e:
            ok, r, detail = False, e, f"over {TIMEOUT_S} s"
        print(f"{'ok  ' if ok else 'FAIL'} {where}: {lang} ({detail})")
        if not ok:
            sys.stdout.write(f"--- program ({name})\n{text}--- stdout\n{r.stdout or ''}\n"
                             f"--- stderr\n{r.stderr or ''}\n")
        return ok
    finally:
        subprocess.run(["rm", "-rf", root])


def scratch_tree(src, build):
    """A folder that looks like the source tree with build/release = the build under test.
    Commands write their results there, never into the checkout."""
    root = tempfile.mkdtemp(prefix="fx-doc-")
    for name in os.listdir(src):
        if name in ("build", "results") or name.startswith(".git"):
            continue
        os.symlink(os.path.join(src, name), os.path.join(root, name))
    os.makedirs(os.path.join(root, "build"))
    os.symlink(build, os.path.join(root, "build", "release"))
    return root


def main():
    src, build = (os.path.abspath(p) for p in sys.argv[1:3])
    docs = [os.path.join(src, "README.md"), os.path.join(src, "python", "README.md")]
    docs += sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    data_dir = os.environ.get("FLEXPOINT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    if not os.path.isdir(data_dir):
        print(f"skip: no Fashion-MNIST in {data_dir} (Debian package dataset-fashion-mnist)")
        return 77
    env = dict(os.environ)
    env["FLEXPOINT_LIBRARY"] = os.path.join(build, "libflexpoint.so")
    env["PYTHONPATH"] = os.path.join(src, "python") + os.pathsep + env.get("PYTHONPATH", "")
    failures, ran, quoted = 0, 0, 0
    for doc in docs:
        rel = os.path.relpath(doc, src)
        chains = {}
        for line, lang, attrs, text in blocks(doc):
            where = f"{rel}:{line}"
            files = [a[5:] for a in attrs if a.startswith("file=")]
            if files:
                quoted += 1
                target = os.path.join(src, files[0])
                if not os.path.isfile(target) or text not in open(target, encoding="utf-8").read():
                    print(f"FAIL {where}: the block is not a verbatim part of {files[0]}")
                    failures += 1
                else:
                    print(f"ok   {where}: quotes {files[0]}")
                continue
            if "runnable" not in attrs:
                continue
            if lang not in ("sh", "python"):
                print(f"FAIL {where}: runnable block of unknown language '{lang}'")
                failures += 1
                continue
            if "chain" in attrs:
                chains.setdefault(lang, []).append((line, text))
                continue
            ran += 1
            name = f"{rel.replace('/', '_')}_{line}.{'sh' if lang == 'sh' else 'py'}"
            if not run_block(f"{where}: block", lang, text, src, build, env, name):
                failures += 1
        for lang, parts in chains.items():
            ran += len(parts)
            lines = ", ".join(str(line) for line, _ in parts)
            name = f"{rel.replace('/', '_')}_chain.{'sh' if lang == 'sh' else 'py'}"
            if not run_block(f"{rel}: chain of {len(parts)} blocks at lines {lines}", lang,
                             chain_program(parts), src, build, env, name):
                failures += 1
    print(f"{ran} runnable blocks run, {quoted} quoted sources checked, {failures} failures")
    if ran == 0 or quoted == 0:
        print("FAIL: no runnable or quoted block found; the markers were lost")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
