"""The suite's iree-compile remembers: the same program, spec and flags are compiled once in a run
of the suite, however many tests ask (most of the suite's time is real compiles of a few small
models, a third of them repeats). The tuner is unchanged: it runs `iree-compile` as ever, through
$IREE_TUNER_TOOLS, and gets the files a compile writes; a compile nothing matched before is real.

What a compile is known by: iree-compile itself (its path, size and time), and every argument,
each file it names replaced by that file's bytes (response files read the same way). A module
keeps the path of its program (its source locations), so each program is compiled from a copy
named by its bytes: the same program gives the same module wherever a test wrote it (builds of
one program differ only where their flags or specs do, as with the real tool), and what the
compiler says names the path it was given. What a compile wrote comes back where the call asked:
its `-o` file, each `--...-to=DIR` dump directory, its output and exit status. A call this cannot
read surely (standard input, a directory as an argument, a program naming files by
`path = "..."`, a response file it cannot split) is compiled for real and not remembered.

Off with IREE_TUNER_TEST_MEMO=0; a test that needs the wheels' own tools deletes $IREE_TUNER_TOOLS
(as test_run_safety's do). The store's compiles.log says of each call whether it compiled or was
remembered, its seconds and the test; to keep it after a run, make the tools with `memo_tools()`
and give the run $IREE_TUNER_TEST_MEMO_DIR (any value) and $IREE_TUNER_TOOLS (their directory)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Runs as the tool itself (`python -S`: no site, nothing but the standard library).
SHIM = r'''#!{python} -S
import hashlib, json, os, shlex, shutil, subprocess, sys, tempfile, time
REAL, STORE = {real!r}, {store!r}
args = sys.argv[1:]


def digest(path):
    data = open(path, "rb").read()
    if b'path = "' in data or b'path="' in data:  # names other files, whose bytes are not in the key
        raise LookupError(path)
    return hashlib.sha256(data).hexdigest()


def describe(values, outputs, dumps, programs):
    # What each argument stands for in the key; the outputs, dumps and programs (files given
    # alone, at the top level) found on the way.
    out, skip = [], False
    for i, a in enumerate(values):
        if skip:
            skip = False
            continue
        if a == "-o":
            if i + 1 >= len(values) or values[i + 1] == "-":
                raise LookupError(a)
            outputs.append(values[i + 1])
            out.append("-o")
            skip = True
            continue
        if a.startswith("@"):
            try:
                inner = shlex.split(open(a[1:]).read())
            except (OSError, ValueError):
                raise LookupError(a)
            out.append("@[" + ",".join(describe(inner, outputs, dumps, None)) + "]")
            continue
        name, eq, value = a.partition("=")
        if eq and name.startswith("--") and name.endswith("-to"):
            dumps.append(value)
            out.append(name)
            continue
        value = value if eq else a
        if value == "-":
            raise LookupError(a)
        if value and not value.startswith("-") and os.path.exists(value):
            if os.path.isdir(value):
                raise LookupError(a)
            known = digest(value)
            if not eq:
                if programs is None:  # a program inside a response file keeps its own path
                    known = os.path.realpath(value) + ":" + known
                else:
                    programs[i] = known
            out.append((name + "=" if eq else "") + "file:" + known)
            continue
        out.append(a)
    return out


try:
    outputs, dumps, programs = [], [], {{}}
    st = os.stat(REAL)
    key = hashlib.sha256(json.dumps([REAL, st.st_size, st.st_mtime_ns, describe(args, outputs, dumps, programs)])
                         .encode()).hexdigest()
except (LookupError, OSError):
    os.execv(REAL, [REAL, *args])

# A module keeps its program's path (its source locations): each program is compiled from a
# copy named by its bytes, so that the same program gives the same module wherever it lies, and
# the copy's path is the given one again in what the compiler says.
sources = os.path.join(STORE, "sources")
os.makedirs(sources, exist_ok=True)
compiled, said = list(args), []
for i, known in programs.items():
    copy = os.path.join(sources, known + os.path.splitext(args[i])[1])
    if not os.path.exists(copy):
        made = copy + f".{{os.getpid()}}"
        shutil.copyfile(args[i], made)
        os.replace(made, copy)
    compiled[i] = copy
    said.append((copy.encode(), args[i].encode()))


def as_given(text):
    for copy, given in said:
        text = text.replace(copy, given)
    return text


def log(what, seconds):  # each compile, remembered or not, its seconds and the test that asked
    with open(os.path.join(STORE, "compiles.log"), "a") as f:
        f.write(f"{{what}} {{seconds:.2f}} {{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}}\n")


entry = os.path.join(STORE, key)
if not os.path.isfile(os.path.join(entry, "done.json")):
    made = tempfile.mkdtemp(dir=STORE, prefix=".new-")
    start = time.perf_counter()
    run = subprocess.run([REAL, *compiled], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    sys.stdout.buffer.write(as_given(run.stdout))
    sys.stderr.buffer.write(as_given(run.stderr))
    try:
        for i, path in enumerate(outputs):
            if os.path.isfile(path):
                shutil.copyfile(path, os.path.join(made, f"out{{i}}"))
        for i, directory in enumerate(dumps):
            if os.path.isdir(directory):
                shutil.copytree(directory, os.path.join(made, f"dump{{i}}"))
        with open(os.path.join(made, "stdout"), "wb") as f:
            f.write(run.stdout)
        with open(os.path.join(made, "stderr"), "wb") as f:
            f.write(run.stderr)
        with open(os.path.join(made, "done.json"), "w") as f:
            json.dump({{"rc": run.returncode, "seconds": seconds}}, f)
        os.rename(made, entry)
    except OSError:  # another process remembered it first, or the disk is full: not remembered
        shutil.rmtree(made, ignore_errors=True)
    log("compiled", seconds)
    sys.exit(run.returncode)
for i, path in enumerate(outputs):
    kept = os.path.join(entry, f"out{{i}}")
    if os.path.isfile(kept):
        shutil.copyfile(kept, path)
for i, directory in enumerate(dumps):
    kept = os.path.join(entry, f"dump{{i}}")
    if os.path.isdir(kept):
        shutil.copytree(kept, directory, dirs_exist_ok=True)
sys.stdout.buffer.write(as_given(open(os.path.join(entry, "stdout"), "rb").read()))
sys.stderr.buffer.write(as_given(open(os.path.join(entry, "stderr"), "rb").read()))
done = json.load(open(os.path.join(entry, "done.json")))
log("remembered", done["seconds"])
sys.exit(done["rc"])
'''


def memo_tools(directory: Path, store: Path) -> Path:
    """`directory` made a tools directory for $IREE_TUNER_TOOLS: iree-compile remembering its
    compiles in `store` (shared by the suite's workers), every other IREE tool the installed one."""
    from tuner.tools import find_tool

    directory.mkdir(parents=True, exist_ok=True)
    store.mkdir(parents=True, exist_ok=True)
    real = find_tool("iree-compile")
    shim = directory / "iree-compile"
    shim.write_text(SHIM.format(python=sys.executable, real=real, store=str(store)))
    shim.chmod(0o755)
    # Every other tool where find_tool finds it: the wheels' executables, this Python's scripts.
    folders = {Path(find_tool(n)).parent for n in ("iree-compile", "iree-run-module")} | {Path(sys.executable).parent}
    for name in sorted({t.name for f in folders for t in f.glob("iree-*")} - {"iree-compile"}):
        tool = find_tool(name)
        if os.access(tool, os.X_OK) and not (directory / name).exists():
            (directory / name).symlink_to(tool)
    return directory
