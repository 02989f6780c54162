"""`report html`: a frozen report as a static site a reviewer opens from a file or a bucket.

Templates (Jinja2, autoescaped) and the stylesheet and search script live beside this module;
`build.build_site` writes the folder; `publish.publish_site` reads reports from and publishes
sites to object storage too. See ``docs/site.md``.
"""

from near_dedup_core.site.build import SiteResult, build_site, site_of
from near_dedup_core.site.publish import publish_site

__all__ = ["SiteResult", "build_site", "publish_site", "site_of"]
