"""Regenerate sepp's protobuf/gRPC Python code from proto/ into src/sepp/api/v1.

Usage: ``python scripts/gen_protos.py [--check]``. ``--check`` regenerates into a
temporary folder and exits 1 if the committed files differ (CI runs it).
The output is committed and never edited by hand.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_ROOT = ROOT / "src"
PKG = Path("sepp/api/v1")


def generate(out_root: Path) -> None:
    """Run protoc with the grpc and mypy-protobuf plugins into ``out_root/sepp/api/v1``."""
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
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for init in (out_root / "sepp/api/__init__.py", out_root / PKG / "__init__.py"):
        init.write_text('"""Generated gRPC/protobuf code for sepp. Do not edit; run scripts/gen_protos.py."""\n')


def main() -> int:
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            fresh, committed = Path(tmp) / PKG, OUT_ROOT / PKG
            names = {p.name for p in fresh.iterdir() if p.is_file()}
            names |= {p.name for p in committed.iterdir() if p.is_file() and not p.name.endswith(".pyc")}
            diff = [n for n in sorted(names) if not (fresh / n).exists() or not (committed / n).exists()
                    or not filecmp.cmp(fresh / n, committed / n, shallow=False)]
            if diff:
                print("generated code is stale; run scripts/gen_protos.py:", ", ".join(diff))
                return 1
            print("generated code is up to date")
            return 0
    shutil.rmtree(OUT_ROOT / PKG, ignore_errors=True)
    generate(OUT_ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
