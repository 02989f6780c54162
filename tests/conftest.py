"""Fixtures shared by the test modules: the index backends that the end-to-end cases run on.

``backend`` is each of the three index backends in turn (docs/contract.md §7): a SQLite file,
a database of a PostgreSQL server that the session starts (`pg_server.py`), and Iceberg tables
in a local folder (``iceberg:///folder``, SQLite catalog). The PostgreSQL and Iceberg cases are
marked ``slow`` (`make test-fast` leaves them out; `make test` runs them).
``new_index_location(folder)`` gives a fresh index location of the module's backend;
``index_location`` is one below the test's ``tmp_path``.

The backend is module-scoped so that a module's fixtures that build an index (a few batches
and their reports) do so once per backend; the tests of a module run backend by backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.slow),
    pytest.param("iceberg", id="iceberg", marks=pytest.mark.slow),
]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """One PostgreSQL server for the session's parametrized cases, started on first use."""
    from pg_server import PostgresServer, require_bindir

    bindir = require_bindir()
    pytest.importorskip("psycopg", reason="pip install 'near-dedup[postgres]'")
    server = PostgresServer(bindir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    """"sqlite", "postgresql" or "iceberg"."""
    if request.param == "iceberg":
        pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
    return request.param


@pytest.fixture(scope="module")
def new_index_location(backend, request) -> Callable[[Path], str]:
    """``new_index_location(folder)``: a location where no index exists yet, of the module's
    backend (the SQLite file and the Iceberg folder below ``folder``; a new PostgreSQL
    database)."""
    server = request.getfixturevalue("postgres_server") if backend == "postgresql" else None

    def make(folder: Path) -> str:
        if server is not None:
            return server.create_database()  # type: ignore[attr-defined]
        if backend == "iceberg":
            return f"iceberg://{(folder / 'iceberg').resolve()}"
        return str(folder / "index.sqlite")

    return make


@pytest.fixture
def index_location(new_index_location, tmp_path) -> str:
    """A fresh index of the module's backend for this test."""
    return new_index_location(tmp_path / "index")
