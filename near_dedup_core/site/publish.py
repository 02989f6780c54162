"""`report html` with its report, ``--against``, ``--contamination`` and site on object storage.

A report given as a URL is read as every report command reads one (`storage.local_folder`:
listed once, fetched into a temporary folder of the same name, which `build.build_site`
reads); a site given as a URL is built into a local temporary folder and published like any
other output (`storage.Location.publish`: refused if the prefix holds anything, uploaded
under a staging prefix, ``checksums.sha256`` last). The site's bytes are those of a local
build: it names the folders only by their last name, which a fetched folder keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from near_dedup_core.errors import NearDedupError
from near_dedup_core.site.build import SiteResult, build_site
from near_dedup_core.storage import Location, in_place, local_folder, parse_location


def publish_site(report: str | Path | Location, output: str | Path | Location, *,
                 against: str | Path | Location | None = None,
                 contamination: str | Path | Location | None = None,
                 inputs: Sequence[str | Path] = (), progress: bool = False) -> SiteResult:
    """`build.build_site` for locations that may be URLs; the result names them as given."""
    given = {"report": parse_location(report), "against": _parsed(against),
             "contamination": _parsed(contamination)}
    site = parse_location(output)
    if not site.is_local:
        for role, where in given.items():
            if where is not None and site.url.startswith(where.url.rstrip("/") + "/"):
                raise NearDedupError(f"output {site.url} is inside the {role} {where.url}; "
                                     f"reports are never changed")
        site.require_new_output()  # at once, before the build
    with ExitStack() as stack:
        folders = {role: None if where is None else stack.enter_context(local_folder(where))
                   for role, where in given.items()}
        report_folder = folders["report"]
        assert report_folder is not None
        if site.is_local:
            result = build_site(report_folder, Path(site.url), against=folders["against"],
                                contamination=folders["contamination"], inputs=inputs,
                                    progress=progress)
        else:
            with site.publish() as staged:
                staged.rmdir()  # the build makes the folder itself, whole or not at all
                result = build_site(report_folder, staged, against=folders["against"],
                                    contamination=folders["contamination"], inputs=inputs,
                                    progress=progress)
        notes = list(result.notes)
        for role, folder in folders.items():
            where = given[role]
            if folder is not None and where is not None:
                notes = [in_place(note, folder, where) for note in notes]
    return replace(result, output=site.url if not site.is_local else result.output,
                   notes=notes)


def _parsed(where: str | Path | Location | None) -> Location | None:
    return None if where is None else parse_location(where)
