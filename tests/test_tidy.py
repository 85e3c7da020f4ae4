"""Tidy: the tree keeps the limits it already keeps (as TigerBeetle's ``tidy`` does).

* no function over ``FUNCTION_LINES_MAX`` lines, no class over ``CLASS_LINES_MAX`` (the code's
  own packages and the benchmarks; migrations and protobuf stubs are generated), a class
  counted with the concrete classes of its package it extends (a limit met by stacking code
  in a subclass is not met);
* one spelling of each fact that once had several homes: the qualified segment-name format
  (``millrace.kernel.naming``), the token resource of a stream (``claims.stream_resource``),
  the event header (``millrace.kernel.wire.event_frame``), the Celery task names
  (``controller_app.task_names``);
* no package that holds no code (a folder of nothing but an ``__init__.py`` without a line).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.import_graph import cycles, import_graph
from tests.fixtures.source_tree import parse

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("millrace", "controller_app", "segment_app", "tiers", "spark_bridge", "admin_ui")
FUNCTION_LINES_MAX = 80
CLASS_LINES_MAX = 500


def sources(*folders: str) -> Iterator[Path]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" not in path.parts and not path.stem.endswith(("_pb2", "_pb2_grpc")):
                yield path


def code_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` outside docstrings and comments (what code spells)."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(value.lineno, (value.end_lineno or value.lineno) + 1))
    for number, line in enumerate(text.splitlines(), 1):
        if number not in docstrings and not line.lstrip().startswith("#"):
            yield number, line.split("  #")[0]


def test_no_function_or_class_is_too_long() -> None:
    too_long = []
    for path in sources(*PACKAGES, "bench"):
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = FUNCTION_LINES_MAX
            elif isinstance(node, ast.ClassDef):
                limit = CLASS_LINES_MAX
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert not too_long, "over the limit (lines):\n" + "\n".join(too_long)


#: Classes that gather the areas they extend on purpose, and why.
GATHERING = {
    "controller_app/grpc/service.py:ControllerService": "a gRPC servicer is one object with "
    "every rpc; its areas (one module each) are its bases",
}


def _classes(package: str) -> dict[str, tuple[str, ast.ClassDef]]:
    """The top-level classes of ``package`` by name (``test_no_two_classes_of_one_name...``
    keeps the names unique)."""
    found = {}
    for path in sources(package):
        for node in parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found[node.name] = (str(path.relative_to(ROOT)), node)
    return found


def _is_abstract(node: ast.ClassDef) -> bool:
    """A contract whose implementations are each a class (``abc.ABC``, ``Protocol``)."""
    spelled = {ast.unparse(base) for base in node.bases}
    return bool(spelled & {"abc.ABC", "ABC", "Protocol", "typing.Protocol"})


def _lines(node: ast.ClassDef) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def test_no_class_is_too_long_with_what_it_extends() -> None:
    too_long = []
    for package in PACKAGES:
        classes = _classes(package)
        for name, (path, node) in classes.items():
            if f"{path}:{name}" in GATHERING:
                continue
            total, seen, bases = _lines(node), {name}, [ast.unparse(b) for b in node.bases]
            while bases:
                base = classes.get(bases.pop())
                if base is None or base[1].name in seen or _is_abstract(base[1]):
                    continue
                seen.add(base[1].name)
                total += _lines(base[1])
                bases += [ast.unparse(b) for b in base[1].bases]
            if total > CLASS_LINES_MAX and len(seen) > 1:
                too_long.append(f"{path} {name} with {sorted(seen - {name})}: {total}")
    assert not too_long, "over the limit with their bases (lines):\n" + "\n".join(too_long)


def _task_names() -> list[str]:
    from controller_app import task_names  # constants only: no Django needed

    return [value for name, value in vars(task_names).items() if name.isupper()
            and isinstance(value, str)]  # fmt: skip


#: Each fact, how code would spell it again, and its one home.
ONE_HOME = {
    "segment-name format": (re.compile(r"""f["'][^"']*\.#epoch\."""), "millrace/kernel/naming.py"),
    "stream token resource": (
        re.compile(r"""f["']\{scope\}/\{stream\}/["']"""),
        "millrace/kernel/claims.py",
    ),
    "event header": (
        re.compile(r"""struct\.Struct\(["']>ii["']\)"""),
        "millrace/kernel/wire/event_frame.py",
    ),
    "Celery task name": (
        re.compile("|".join(f"[\"']{re.escape(name)}[\"']" for name in _task_names())),
        "controller_app/task_names.py",
    ),
}

#: Where ``>ii`` is another header of the same shape (the wire protocol's frame header).
OTHER_IIS = {"millrace/kernel/wire/codec.py"}


def test_each_fact_has_one_home() -> None:
    found = []
    for path in sources(*PACKAGES, "bench"):
        relative = str(path.relative_to(ROOT))
        for fact, (spelling, home) in ONE_HOME.items():
            if relative == home or (fact == "event header" and relative in OTHER_IIS):
                continue
            for number, line in code_lines(path):
                if spelling.search(line):
                    found.append(f"{relative}:{number} spells the {fact} (its home: {home})")
    assert not found, "\n".join(found)


def test_no_empty_package() -> None:
    empty = [
        str(folder.relative_to(ROOT))
        for package in PACKAGES
        for folder in [ROOT / package, *(ROOT / package).rglob("*")]
        if folder.is_dir()
        and folder.name != "__pycache__"
        and (folder / "__init__.py").exists()
        and not any(p.name != "__init__.py" for p in folder.glob("*.py"))
        and not any(d.is_dir() and d.name != "__pycache__" for d in folder.iterdir())
        and not (folder / "__init__.py").read_text().strip()
    ]
    assert not empty, f"packages without code: {empty}"


def test_every_decision_is_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    missing = [path.name for path in sorted((ROOT / "docs" / "decisions").glob("[0-9]*.md"))
               if f"(decisions/{path.name})" not in index]  # fmt: skip
    assert not missing, f"docs/README.md does not list {missing}"


def _class_names(folder: Path) -> dict[str, list[str]]:
    """Top-level class name -> the modules of ``folder`` (a package, its sub-packages
    included) that define it."""
    found: dict[str, list[str]] = {}
    for path in sources(str(folder.relative_to(ROOT))):
        for node in parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    return found


#: Modules that spell Pravega's own names on purpose (its Python client's classes, its wire
#: commands), whatever else in the package has the name.
PRAVEGAS_NAMES = {"millrace/client/pravega_compat.py", "millrace/kernel/wire/commands.py"}


def test_no_two_classes_of_one_name_in_a_package() -> None:
    twice = []
    for package in PACKAGES:
        for name, paths in _class_names(ROOT / package).items():
            ours = [path for path in paths if path not in PRAVEGAS_NAMES]
            if len(ours) > 1 or (len(paths) > 1 and not ours):
                twice.append(f"{name}: {', '.join(paths)}")
    assert not twice, "one name, two classes:\n" + "\n".join(twice)


def test_every_package_docstring_names_its_modules() -> None:
    unnamed = []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            if "migrations" in init.parts:
                continue
            doc = ast.get_docstring(parse(init.read_text())) or ""
            modules = [p.stem for p in init.parent.glob("*.py")
                       if p.stem not in ("__init__", "__main__")
                       and not p.stem.endswith(("_pb2", "_pb2_grpc"))]  # fmt: skip
            modules += [d.name for d in init.parent.iterdir()
                        if (d / "__init__.py").exists() and d.name != "migrations"]  # fmt: skip
            unnamed += [f"{init.parent.relative_to(ROOT)}: {m}" for m in modules if m not in doc]
    assert not unnamed, "a package's docstring does not name:\n" + "\n".join(unnamed)


def test_no_module_cycle() -> None:
    """No two of the project's modules import each other, however indirectly: an import inside
    a function or under ``TYPE_CHECKING`` counts (``tests.fixtures.import_graph``)."""
    graph = import_graph(ROOT, PACKAGES)
    found = [
        " -> ".join(component) + "\n    " + "\n    ".join(
            f"{module} imports {', '.join(sorted(graph[module] & set(component)))}"
            for module in component
        )
        for component in cycles(graph)
    ]  # fmt: skip
    assert not found, "modules in a circle:\n" + "\n".join(found)


#: Names whose default is a domain default of ``millrace.kernel.defaults``: a parameter or a
#: field of one of these names may not default to a number written out.
DEFAULTED_NAMES = {
    "lease_ms", "reader_timeout_ms", "delivery_timeout_s", "wait", "frame_bytes_max", "silence_s",
}  # fmt: skip
#: Numbers that are one of those defaults wherever they are written (30,000 ms: the lease, the
#: reader timeout; 120.0 s: the delivery timeout).
DEFAULT_NUMBERS = {(int, 30_000), (float, 120.0)}


def _numbers_defaulted(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and (type(node.value), node.value) in DEFAULT_NUMBERS:
            yield node.lineno, f"the number {node.value!r}"
        pairs: list[tuple[str, ast.expr | None]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs += zip([a.arg for a in positional[len(positional) - len(args.defaults):]],
                         args.defaults, strict=True)  # fmt: skip
            pairs += [(a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.value))
        for name, value in pairs:
            numeric = isinstance(value, ast.BinOp) or (
                isinstance(value, ast.Constant) and type(value.value) in (int, float)
            )
            if name in DEFAULTED_NAMES and numeric:
                yield value.lineno, f"{name} defaulting to a number"  # type: ignore[union-attr]


def test_each_default_has_one_home() -> None:
    """The domain defaults (a transaction's lease, a reader's timeout, the delivery timeout,
    the workflow wait, the largest frame, the clients' silence limit) are written once, in
    ``millrace/kernel/defaults.py``; everything else names them."""
    home = ROOT / "millrace" / "kernel" / "defaults.py"
    found = [
        f"{path.relative_to(ROOT)}:{line} writes {what} (its home: millrace/kernel/defaults.py)"
        for path in sources(*PACKAGES)
        if path != home
        for line, what in _numbers_defaulted(parse(path.read_text()))
    ]
    assert not found, "\n".join(found)


#: Where each of the controller's records is written (a module, or a package and its modules):
#: nothing else writes it. The model layer (``controller_app/models/``) writes through its own
#: helpers (a state transition, the credentials' generation) for the homes that call them.
WRITE_HOMES = {
    **dict.fromkeys(
        ("Scope", "Stream", "StreamTag", "StreamBucket", "BucketLease", "Epoch", "SegmentRecord",
         "EpochTransition", "Transaction", "CompletedTransaction", "WriterMark", "Watermark",
         "TruncationRecord", "StreamCutRecord", "ReaderGroup", "Subscriber", "KeyValueTable"),
        "controller_app/workflows/",
    ),
    **dict.fromkeys(("Grant", "User", "Group", "Token"), "controller_app/access/"),
    **dict.fromkeys(
        ("Node", "Container", "ContainerAssignment", "ContainerMove", "ClusterLease"),
        "controller_app/cluster/",
    ),
    **dict.fromkeys(("RegistrySchema", "SubjectVersion", "RegistrySetting"),
                    "controller_app/registry/service.py"),
    **dict.fromkeys(("ScopeQuota", "QuotaUsage"), "controller_app/quotas.py"),
    "ProcessHeartbeat": "controller_app/operations/heartbeats.py",
    "CanaryProbe": "controller_app/operations/canary.py",
    "ReaderGroupLag": "controller_app/lag.py",
    "KafkaGroupLag": "controller_app/kafka_lag.py",
    "AuditEntry": "controller_app/audit.py",
    **dict.fromkeys(("KafkaCommittedOffset", "KafkaProducerId", "KafkaNodeReport"),
                    "controller_app/kafka_catalog.py"),
    "TaskCount": "controller_app/tasks.py",
}  # fmt: skip
#: What writes a record: a manager's or a query set's writing call, an instance's save or delete.
_MANAGER_WRITES = {"create", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
_QUERY_STEPS = {"objects", "_default_manager", "filter", "exclude", "select_for_update", "all"}


def _chain(node: ast.expr) -> list[str]:
    """``A.objects.filter(...).update`` -> ``["A", "objects", "filter"]`` (calls skipped)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            if isinstance(node, ast.Name):
                names.append(node.id)
            return names[::-1]


def _writes(tree: ast.Module) -> Iterator[tuple[int, str | None]]:
    """(line, the model written, or None when the code does not name it) of each write."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, chain = node.func.attr, _chain(node.func.value)
        queried = bool(_QUERY_STEPS & set(chain))
        model = chain[0] if queried and chain else None
        model = "User" if model == "get_user_model" else model
        managed = queried and (method in _MANAGER_WRITES or (method == "update" and not node.args))
        saved = method == "save" and not node.args
        deleted = method == "delete" and not node.args and not node.keywords
        if managed or saved or deleted:
            yield node.lineno, model


def test_each_record_is_written_in_its_home() -> None:
    """A record (a model's row) is written only in its home (``WRITE_HOMES``); a write whose
    model the code does not name (``row.save()``) only in a module that is a home."""
    homes = set(WRITE_HOMES.values()) | {"controller_app/models/"}
    found = []
    for path in sources("controller_app", "admin_ui", "millrace/ops", "millrace/project"):
        relative = str(path.relative_to(ROOT))
        if relative.startswith("controller_app/models/"):
            continue
        for line, model in _writes(parse(path.read_text())):
            home = WRITE_HOMES.get(model or "")
            if model in WRITE_HOMES and not relative.startswith(str(home)):
                found.append(f"{relative}:{line} writes {model} (its home: {home})")
            elif model not in WRITE_HOMES and not any(relative.startswith(h) for h in homes):
                found.append(f"{relative}:{line} writes {model or 'a record'} outside every home")
    assert not found, "\n".join(found)


def test_no_file_cites_a_file_outside_the_project() -> None:
    """Users see the project, not the notes it was built from: no file names the founders'
    shared design and style files."""
    outside = re.compile(r"\b(STYLE|DESIGN)\.md\b|\.\./shared/")
    suffixes = {".py", ".md", ".toml", ".html", ".txt", ".cfg", ".sh", ".yml", ".yaml"}
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (*PACKAGES, "bench", "docs", "tests", "templates", "scripts", "deploy", ".")
        for path in sorted((ROOT / folder).rglob("*") if folder != "." else ROOT.glob("*"))
        if path.suffix in suffixes and ".venv" not in path.parts and path != Path(__file__)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not found, "cites a file outside the project: " + ", ".join(found)


#: How a REST path of the controller's API starts (``/v1`` and ``/registry`` paths alike).
_REST_PATH = re.compile(
    r"^/?(v1/|scopes\b|cluster\b|acl\b|metrics/targets|subjects\b|schemas/|config\b|compatibility/)"
)


def _strings_outside_docstrings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                docstrings.add(id(first))  # (counted as the f-string)
                yield node.lineno, first.value
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def test_each_rest_path_is_spelled_once_on_the_client_side() -> None:
    """The SDK, the command line and the Spark bridge name the REST API's paths through
    ``millrace.kernel.rest_paths``; a path written out anywhere else on the client side fails."""
    home = ROOT / "millrace" / "kernel" / "rest_paths.py"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sources("millrace/client", "millrace/ops/cli", "spark_bridge")
        if path != home
        for line, text in _strings_outside_docstrings(parse(path.read_text()))
        if text.startswith("/") and _REST_PATH.match(text)
    ]
    assert not found, "a REST path spelled outside millrace/kernel/rest_paths.py:\n" + "\n".join(
        found
    )
