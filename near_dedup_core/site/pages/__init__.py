"""The pages of the report site, one module per page or group of pages, each with a
``write`` that renders its pages through the `render.Writer` (`build._write_pages` calls
them in turn; the diff pages are `site.diffs`)."""

from near_dedup_core.site.pages import (
    changes,
    clusters,
    contamination,
    guard,
    overview,
    search,
    sources,
)

__all__ = ["changes", "clusters", "contamination", "guard", "overview", "search", "sources"]
