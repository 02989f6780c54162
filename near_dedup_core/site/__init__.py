"""`report html`: a frozen report as a static site a reviewer opens from a file or a bucket.

Templates (Jinja2, autoescaped) and the stylesheet and search script live beside this module;
`build.build_site` writes the folder. See ``docs/site.md``.
"""

from near_dedup_core.site.build import SiteResult, build_site, site_of

__all__ = ["SiteResult", "build_site", "site_of"]
