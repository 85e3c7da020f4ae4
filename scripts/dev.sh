#!/usr/bin/env bash
# Developer entry points of Millrace (the README's quickstart):
#   bash scripts/dev.sh standalone [ARGS...]  run a node on ./data (SQLite, file tiers, no services)
#   bash scripts/dev.sh test [PYTEST ARGS...]  ruff, import contracts, mypy, then the whole test suite
#                                             (installs Debian's chromium and prometheus for the tests)
#   bash scripts/dev.sh pytest [PYTEST ARGS...]  the tests alone, on the same workers as test
# Both create .venv (with $MILLRACE_PYTHON, default python3.11) and install into it what they
# need when missing: standalone millrace[server,spark] (a node, the client, the Spark bridge
# of the README's examples), test millrace[dev]
# (every extra and the test tools); they reinstall only when pyproject.toml, the set of
# top-level packages or the extras changed (a .venv set up for the tests runs a node as it is).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=.venv
python=${MILLRACE_PYTHON:-python3.11}

die() {
  echo "dev.sh: $*" >&2
  exit 1
}

install_stamp() {
  # What the editable install depends on: the project file and which top-level packages exist.
  { cat pyproject.toml; ls -d -- */__init__.py; } | sha256sum | cut -d' ' -f1
}

setup() {
  # $1: the extras to install: server,spark (a node, the client and the Spark bridge) or dev
  # (the tests: every extra and the test tools).
  local extras=$1
  if [ ! -x "$venv/bin/python" ]; then
    command -v "$python" >/dev/null || die "$python not found: install Python 3.11+ or set MILLRACE_PYTHON"
    echo "dev.sh: creating $venv with $python"
    "$python" -m venv "$venv"
  fi
  local stamp_file="$venv/.millrace-install-stamp" want have log
  want=$(install_stamp)
  have=$(cat "$stamp_file" 2>/dev/null || true)
  if [ "$have" = "$extras $want" ] || { [ "$extras" = server,spark ] && [ "$have" = "dev $want" ]; }; then
    return 0
  fi
  log="$venv/pip-install.log"
  echo "dev.sh: installing millrace[$extras] into $venv (full log: $log)"
  # One line per package instead of pip's full output; the log keeps everything.
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -e ".[$extras]" 2>&1 |
    tee "$log" | { grep --line-buffered -E '^(Collecting|Successfully installed)' || true; } |
    sed -u 's/^/  /'; then
    tail -n 30 "$log" >&2
    die "pip install failed (see $log)"
  fi
  echo "$extras $want" >"$stamp_file"
}

ensure_debian_packages() {
  # The console's end-to-end tests drive Debian's chromium through Playwright (no browser
  # download); the observability tests run Debian's prometheus (and promtool); the Kafka tests
  # run Debian's kcat. Installed once
  # with apt-get (as root, or through sudo), with no service started: the tests start their own.
  local missing=() sudo=""
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ] || missing+=(prometheus)
  [ -x /usr/bin/kcat ] || missing+=(kcat)
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing: ${missing[*]}: install these Debian packages"
    sudo="sudo"
  fi
  echo "dev.sh: installing Debian's ${missing[*]} for the tests"
  local policy=/usr/sbin/policy-rc.d made=""
  if [ ! -e $policy ]; then # no daemon started by the packages' scripts
    printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null && $sudo chmod +x $policy
    made=1
  fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
  [ -z "$made" ] || $sudo rm -f $policy
}

run_tests() {
  export PATH="$PWD/$venv/bin:$PATH"
  local failed=() step
  for step in "ruff check ." "ruff format --check ." "lint-imports" "mypy"; do
    echo "dev.sh: $step"
    SECONDS=0
    $step || failed+=("$step")
    echo "dev.sh: $step took ${SECONDS}s"
  done
  run_pytest "$@" || failed+=("pytest")
  if [ ${#failed[@]} -gt 0 ]; then
    echo "dev.sh: FAILED: ${failed[*]}" >&2
    return 1
  fi
  echo "dev.sh: all checks passed"
}

run_pytest() {
  # Two workers (MILLRACE_TEST_WORKERS; 0: none): most whole-process tests wait on their
  # processes, so a second worker nearly halves the suite's time even on two cores. Tests go
  # to whichever worker is free, a module's tests together (--dist loadgroup, each module a
  # group: tests/conftest.py; so a module's node or browser is made once, and the tests marked
  # with a group of their own, which share a cluster or test_query_budgets' long stream, find
  # it there); each worker has a data directory of its own
  # (MILLRACE_DATA_DIR), so that the embedded broker and database of one are never the
  # other's (a Celery worker one test starts would take the other's tasks).
  export PATH="$PWD/$venv/bin:$PATH"
  local workers=${MILLRACE_TEST_WORKERS:-2} spread=() scratch="" n status=0
  if [ "$workers" -gt 0 ]; then
    scratch=$(mktemp -d -t millrace-tests-XXXXXX)
    spread=(--dist loadgroup)
    for ((n = 0; n < workers; n++)); do
      mkdir -p "$scratch/gw$n"
      spread+=(--tx "popen//env:MILLRACE_DATA_DIR=$scratch/gw$n")
    done
  fi
  echo "dev.sh: pytest ${spread[*]} $*"
  # pytest exits 5 when it collected no test: that is a failure here too.
  SECONDS=0
  pytest "${spread[@]}" "$@" || status=$?
  echo "dev.sh: pytest took ${SECONDS}s"
  [ -z "$scratch" ] || rm -rf "$scratch"
  return $status
}

case "${1:-}" in
  standalone)
    shift
    setup server,spark
    exec "$venv/bin/millrace" standalone --data-dir ./data "$@"
    ;;
  test)
    shift
    SECONDS=0
    setup dev
    ensure_debian_packages
    echo "dev.sh: set up in ${SECONDS}s"
    run_tests "$@"
    ;;
  pytest)
    shift
    setup dev
    run_pytest "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh standalone [ARGS...] | test [PYTEST ARGS...] | pytest [PYTEST ARGS...]" >&2
    exit 2
    ;;
esac
