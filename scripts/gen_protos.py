"""Regenerate sepp's protobuf/gRPC Python code from proto/ into src/sepp/api/v1.

Usage: ``python scripts/gen_protos.py [--check]``.

Without flags it regenerates the committed files in place. Run it with the pinned code
generators (``make`` installs ``requirements/dev.lock`` into ``.venv``), so that the only
change is the one your ``.proto`` edit makes.

``--check`` regenerates into a temporary folder and exits 1 if the committed code is stale
(``make lint`` runs it). It compares what matters and nothing else:

- the message and service definitions: each ``*_pb2.py``'s serialized file descriptor,
  parsed and compared as a ``FileDescriptorProto``;
- the text of every other generated file (service stubs and type stubs), with the lines
  that only name the generator's version taken out (``GRPC_GENERATED_VERSION``, the
  ``Protobuf Python Version`` header and the runtime-version check).

So a newer patch release of grpcio-tools or protobuf does not fail the check, while a
``.proto`` edit that was not regenerated does. The check also makes sure that
``pyproject.toml`` asks for at least the grpcio and protobuf runtime versions the committed
code checks for at import (it raises there on an older runtime). The generators' own
chatter (``Writing mypy to …``) is shown only when protoc fails.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_ROOT = ROOT / "src"
PKG = Path("sepp/api/v1")

# Lines that only say which generator version wrote a file.
_VERSION_LINES = re.compile(
    r"^GRPC_GENERATED_VERSION = .*$|^# Protobuf Python Version: .*$"
    r"|^_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:.*\n)*?\)$",
    re.MULTILINE,
)


def generate(out_root: Path) -> None:
    """Run protoc with the grpc and mypy-protobuf plugins into ``out_root/sepp/api/v1``.

    Raises SystemExit when protoc fails, after printing what the generators wrote.
    """
    include = Path(protoc.__file__).parent / "_proto"
    # mypy-protobuf's plugins live beside the interpreter (a venv's bin/).
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PKG).glob("*.proto"))
    (out_root / PKG).mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *protos,
    ]
    # protoc runs in this process and its plugins inherit file descriptor 2: catch what
    # they print ("Writing mypy to …" per file) and show it only when something failed.
    with tempfile.TemporaryFile() as chatter:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(chatter.fileno(), 2)
        try:
            status = protoc.main(args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if status != 0:
            chatter.seek(0)
            sys.stderr.write(chatter.read().decode(errors="replace"))
            raise SystemExit("protoc failed")
    for init in (out_root / "sepp/api/__init__.py", out_root / PKG / "__init__.py"):
        init.write_text('"""Generated gRPC/protobuf code for sepp. Do not edit; run scripts/gen_protos.py."""\n')


def _descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto a generated ``*_pb2.py`` registers (the bytes literal given to
    ``AddSerializedFile``, read from the module's syntax tree), or None if it has none."""
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(node.args[0].value)
            return proto
    return None


def same_content(fresh: Path, committed: Path) -> bool:
    """Whether two generated files say the same thing, whichever generator version wrote them."""
    new, old = fresh.read_text(), committed.read_text()
    if fresh.name.endswith("_pb2.py"):
        new_desc, old_desc = _descriptor(new), _descriptor(old)
        if new_desc is not None and old_desc is not None:
            return new_desc == old_desc
    return _VERSION_LINES.sub("", new) == _VERSION_LINES.sub("", old)


def _floor(requirements: list[str], name: str) -> tuple[int, ...] | None:
    """The ``>=`` version floor pyproject.toml gives for a package, as a tuple of ints."""
    for req in requirements:
        found = re.fullmatch(rf"{re.escape(name)}\s*>=\s*([0-9.]+).*", req.strip())
        if found:
            return tuple(int(part) for part in found.group(1).split("."))
    return None


def floor_problems(committed: Path) -> list[str]:
    """Where pyproject.toml admits an older runtime than the committed code checks for at import."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    needed: dict[str, tuple[int, ...]] = {}
    for path in committed.glob("*.py"):
        text = path.read_text()
        for found in re.finditer(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'", text, re.MULTILINE):
            needed["grpcio"] = max(needed.get("grpcio", ()), tuple(int(p) for p in found.group(1).split(".")))
        for found in re.finditer(r"^# Protobuf Python Version: ([0-9.]+)", text, re.MULTILINE):
            needed["protobuf"] = max(needed.get("protobuf", ()), tuple(int(p) for p in found.group(1).split(".")))
    problems = []
    for name, version in sorted(needed.items()):
        floor = _floor(deps, name)
        if floor is None or floor < version:
            shown = ".".join(map(str, version))
            problems.append(f"pyproject.toml must ask for {name}>={shown}: the generated code refuses older at import")
    return problems


def main() -> int:
    """Regenerate, or with ``--check`` compare; returns the process exit status."""
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            fresh, committed = Path(tmp) / PKG, OUT_ROOT / PKG
            names = {p.name for p in fresh.iterdir() if p.is_file()}
            names |= {p.name for p in committed.iterdir() if p.is_file() and not p.name.endswith(".pyc")}
            diff = [n for n in sorted(names) if not (fresh / n).exists() or not (committed / n).exists()
                    or not same_content(fresh / n, committed / n)]
            if diff:
                print("generated code is stale (a .proto changed): run `.venv/bin/python scripts/gen_protos.py`"
                      " and commit the result:", ", ".join(diff))
                return 1
            problems = floor_problems(committed)
            if problems:
                print("\n".join(problems))
                return 1
            print("generated code is up to date")
            return 0
    shutil.rmtree(OUT_ROOT / PKG, ignore_errors=True)
    generate(OUT_ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
