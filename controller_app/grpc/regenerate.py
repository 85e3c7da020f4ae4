"""Regenerate the Python stubs of ``controller.proto`` (committed next to it):

    python -m controller_app.grpc.regenerate          # write them
    python -m controller_app.grpc.regenerate --check  # exit 1 if the committed ones differ

grpcio-tools (a server dependency: the schema registry runs its protoc too) compiles the proto
from the repository's root, so that the generated modules import each other as
``controller_app.grpc.controller_pb2``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROTO = HERE / "controller.proto"
GENERATED = ("controller_pb2.py", "controller_pb2.pyi", "controller_pb2_grpc.py")


def generate(out: Path) -> None:
    from grpc_tools import protoc  # a dev dependency: imported only here

    relative = PROTO.relative_to(ROOT)
    code = protoc.main([
        "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}", f"--pyi_out={out}",
        f"--grpc_python_out={out}", str(relative),
    ])  # fmt: skip
    if code != 0:
        raise SystemExit(f"protoc failed ({code}) on {relative}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        made = Path(tmp) / HERE.relative_to(ROOT)
        stale = [name for name in GENERATED
                 if not (HERE / name).exists()
                 or (HERE / name).read_bytes() != (made / name).read_bytes()]  # fmt: skip
        if args.check:
            for name in stale:
                print(f"{HERE / name} differs from what {PROTO.name} generates", file=sys.stderr)
            return 1 if stale else 0
        for name in GENERATED:
            (HERE / name).write_bytes((made / name).read_bytes())
    print(f"wrote {', '.join(GENERATED)} from {PROTO.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
