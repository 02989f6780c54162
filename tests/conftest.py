"""Fixtures shared by the test modules: the index backends that the end-to-end cases run on.

``backend`` is each of the three index backends in turn (docs/contract.md §7): a SQLite file,
a database of a PostgreSQL server that the session starts (`pg_server.py`), and Iceberg tables
in a local folder (``iceberg:///folder``, SQLite catalog). The PostgreSQL and Iceberg cases are
marked ``slow`` (`make test-fast` leaves them out; `make test` runs them).
``new_index_location(folder)`` gives a fresh index location of the module's backend;
``index_location`` is one below the test's ``tmp_path``.

The backend is module-scoped so that a module's fixtures that build an index (a few batches
and their reports) do so once per backend; the tests of a module run backend by backend.

The servers are the session's (one per xdist worker): ``postgres_server``, and
``moto_server`` (S3: a new empty bucket for each test of the storage modules, and for each
module of Iceberg indexes with a shared catalog, ``shared_catalog``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: The modules that take longest under `make test`, longest first (by the test-seconds of
#: each, as measured); the others follow in file order.
#: `make test` hands each worker whole modules (``--dist loadfile``: a module's fixtures, servers
#: and indexes are built once) in collection order, so the long ones go out first and the
#: workers end together instead of one finishing a long module alone.
LONGEST_FIRST = (
    "test_scale_history.py", "test_ray_cluster.py", "test_iceberg_remote.py",
    "test_team_deployment.py", "test_ray.py", "test_assets.py", "test_reliability.py",
    "test_storage_hostile.py", "test_iceberg.py", "test_iceberg_writers.py",
    "test_storage_e2e.py", "test_webserver.py", "test_storage.py", "test_find.py",
    "test_postgres.py", "test_day_cost.py", "test_iceberg_resume.py", "test_index.py",
    "test_startup.py", "test_exhaustion.py", "test_site.py", "test_readme.py", "test_scan.py",
    "test_iceberg_keyed.py", "test_audit.py", "test_site_storage.py", "test_iceberg_write.py",
    "test_contamination_short.py", "test_takedown.py", "test_storage_docs.py",
    "test_takedown_doc.py", "test_bench_lookups.py", "test_maintenance_asset.py",
    "test_integrity.py", "test_contamination_assets.py", "test_report_verify.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the modules of `LONGEST_FIRST` first, in its order (a stable sort,
    after pytest's own reordering: each module's tests keep their order)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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


@pytest.fixture(scope="session")
def moto_server() -> Iterator[object]:
    """One moto S3 server for the session (`s3_server.SharedMoto`): `s3_server.run_s3_server`
    with it gives a test or a module a new empty bucket, without a server's start and stop."""
    pytest.importorskip("s3fs", reason="pip install 'near-dedup[s3]'")
    from s3_server import SharedMoto

    shared = SharedMoto()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(scope="module")
def shared_catalog(moto_server, postgres_server, tmp_path_factory) -> Iterator[tuple]:
    """(s3, pg) for a module of Iceberg indexes with a shared catalog: a new bucket on the
    session's moto server and the session's PostgreSQL server, whose password is in
    PGPASSWORD (never in a location); few band-key buckets (a few files per batch on moto's
    server; the reports do not depend on the count). The environment is the module's."""
    from pg_server import PASSWORD
    from s3_server import run_s3_server

    with pytest.MonkeyPatch.context() as mp, \
            run_s3_server(mp, tmp_path_factory.mktemp("s3"), moto_server) as s3:
        mp.setenv("PGPASSWORD", PASSWORD)
        mp.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", "4")
        yield s3, postgres_server


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
