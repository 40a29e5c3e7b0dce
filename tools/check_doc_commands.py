#!/usr/bin/env python3
"""Run the documentation's runnable examples as written, and check its quoted sources.

Fenced blocks in README.md, docs/*.md and python/README.md are checked by their info string:
  ```sh runnable       run with bash (-e -o pipefail) in a scratch copy of the source tree,
                       where build/release is the build under test;
  ```python runnable   run with python3, the binding from python/ and the library under test;
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
            if lang == "sh":
                cmd = ["bash", "-e", "-o", "pipefail", "-c", text]
            elif lang == "python":
                cmd = [sys.executable, "-c", text]
            else:
                print(f"FAIL {where}: runnable block of unknown language '{lang}'")
                failures += 1
                continue
            root = scratch_tree(src, build)
            ran += 1
            try:
                r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT_S)
                ok = r.returncode == 0
                detail = f"exit {r.returncode}"
            except subprocess.TimeoutExpired as e:
                ok, r, detail = False, e, f"over {TIMEOUT_S} s"
            print(f"{'ok  ' if ok else 'FAIL'} {where}: {lang} block ({detail})")
            if not ok:
                failures += 1
                sys.stdout.write(f"--- command\n{text}--- stdout\n{r.stdout or ''}\n"
                                 f"--- stderr\n{r.stderr or ''}\n")
            subprocess.run(["rm", "-rf", root])
    print(f"{ran} runnable blocks run, {quoted} quoted sources checked, {failures} failures")
    if ran == 0 or quoted == 0:
        print("FAIL: no runnable or quoted block found; the markers were lost")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
