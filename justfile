# Shortcuts for developers (just is optional; each recipe is one plain command).

# Run the service: everything on one machine, with a demo.
run:
    python3 -m codemojex.run

# A short tour of the bus alone.
demo:
    python3 -m echomq_trio.demo

# Lint, type-check and test, exactly as CI does.
ci:
    bash .ci/run

test:
    python3 -m pytest -q

# The fast tier: pure modules, the protocol, settlement; no server (a server binary that does not
# exist proves it), seconds.
test-fast:
    ECHOMQ_SERVER_BIN=/nonexistent/no-server python3 -m pytest -q -m "not server and not slow"

bench:
    python3 tools/bench_bus.py
    python3 tools/bench_notify.py --archiver

# The docs site into docs/_build/html, as CI builds it (pip install '.[docs]'; Graphviz's dot).
docs:
    python3 -m sphinx -W --keep-going -b html docs docs/_build/html
