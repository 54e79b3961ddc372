"""Python files parsed into ASTs by a child interpreter, for the tests that read the code.

CPython 3.11 (CI's is 3.11.7) keeps the depth it checks while building an AST in state its
threads share, so ast.parse can fail with "SystemError: AST constructor recursion depth
mismatch" while another thread builds one too (python/cpython#106905). Python 3.11's own
tracebacks build one to place their ^^^ marks, and a thread an earlier test left behind
may be formatting one: CI saw the error once. The child runs no thread but its own.
"""

import ast
import pickle
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

_PARSE = """\
import ast, pickle, sys
trees = [ast.parse(open(path, encoding="utf-8").read(), path) for path in sys.argv[1:]]
sys.stdout.buffer.write(pickle.dumps(trees))
"""


def parsed(paths: Iterable[Path]) -> dict[Path, ast.Module]:
    """Each file's tree, by its path, in the order given."""
    paths = list(paths)
    child = subprocess.run(
        [sys.executable, "-c", _PARSE, *map(str, paths)], capture_output=True, check=True
    )
    return dict(zip(paths, pickle.loads(child.stdout), strict=True))


def parse(path: Path) -> ast.Module:
    return parsed([path])[path]


def install_requires(setup: Path) -> list[str]:
    """setup.py's install_requires, as written, read from its tree (nothing of it runs)."""
    [declared] = [
        keyword.value
        for node in ast.walk(parse(setup))
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "install_requires"
    ]
    return ast.literal_eval(declared)
