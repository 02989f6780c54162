"""The cluster pages: the list of clusters (``clusters/index.html``, `CLUSTERS_PER_PAGE`
each) and one page per cluster that has one, with its members, edges, notes and matrix."""

from __future__ import annotations

from collections import defaultdict

from near_dedup_core.audit.sources import Key
from near_dedup_core.site import model, views
from near_dedup_core.site.model import Cluster, SiteData
from near_dedup_core.site.render import Writer
from near_dedup_core.site.selection import DiffItem

CLUSTERS_PER_PAGE = 100


def _name(key: Key | None) -> str:
    return "-" if key is None else f"{key[0]}/{key[1]}"


def _member_rows(data: SiteData, c: Cluster) -> list[dict]:
    rows = []
    for k in c.members[:model.CLUSTER_MEMBERS]:
        d = data.decision(k)
        rows.append({"key": k, "split": d.split if d else None,
                     "domain": data.domain(k), "decision": d.decision if d else None,
                     "reason": d.reason if d else None, "kept": d.kept if d else None,
                     "jaccard": d.jaccard if d else None})
    return rows


def _cluster_notes(data: SiteData, c: Cluster) -> list[str]:
    """Why a member that matches another one was kept anyway (no transitivity, the guard)."""
    linked: dict[Key, list[tuple[Key, str | None]]] = defaultdict(list)
    for e in c.edges:  # a sample's matches with earlier samples decide it
        linked[e.a].append((e.b, e.blocked_by))
    out = []
    for k in c.members[:model.CLUSTER_MEMBERS]:
        d = data.decision(k)
        if d is None or d.decision != "keep":
            continue
        partners = linked[k]
        if d.reason == "match_not_kept":
            excluded = [p for p, b in partners if b is None and (pd := data.decision(p))
                        and pd.decision == "exclude"]
            for p in excluded:
                pd = data.decision(p)
                target = pd.kept if pd else None
                direct = any(q == target for q, _ in partners)
                out.append(f"{_name(k)} is kept although it matches {_name(p)}: {_name(p)} "
                           f"was itself excluded in favour of {_name(target)}, and "
                           f"{_name(k)} {'also matches' if direct else 'does not match'} "
                           f"{_name(target)} (matches are not transitive: A≈B, B≈C, "
                           f"A≉C keeps A and C)")
        elif d.reason == "guard_blocked":
            blocked = [p for p, b in partners if b is not None]
            out.append(f"{_name(k)} is kept: its matches ({', '.join(map(_name, blocked))}) "
                       f"differ in numbers or units (the guard keeps them apart)")
    return out


def _matrix(data: SiteData, c: Cluster) -> dict | None:
    if c.size > model.MATRIX_MEMBERS:
        return None
    jac: dict[tuple[Key, Key], tuple[float, str | None]] = {}
    for e in c.edges:
        jac[(e.a, e.b)] = jac[(e.b, e.a)] = (e.jaccard, e.blocked_by)
    node = {k: d.node if (d := data.decision(k)) is not None else None for k in c.members}

    def cell(a: Key, b: Key) -> object:
        if a == b:
            return None
        if (a, b) in jac:
            return jac[(a, b)]
        return "same" if node[a] is not None and node[a] == node[b] else "none"

    cells = [[cell(a, b) for b in c.members] for a in c.members]
    return {"members": c.members, "cells": cells}


def write(w: Writer, data: SiteData, inline: list[DiffItem], diffs: dict[Key, dict],
              diff_pages: dict[Key, str]) -> None:
    clusters = data.relations.clusters
    total = views.pages(len(clusters), CLUSTERS_PER_PAGE)
    with_page = sum(c.page for c in clusters)
    first_diff: dict[int, str] = {}  # a cluster's first diff on the diff pages
    for c in clusters:
        for k in c.members:
            where_ = diff_pages.get(k)
            if where_ is not None:
                first_diff[c.number] = where_
                break
    for p in range(1, total + 1):
        chunk = clusters[(p - 1) * CLUSTERS_PER_PAGE:p * CLUSTERS_PER_PAGE]
        rows = []
        for c in chunk:
            decided = [data.decision(k) for k in c.members]
            rows.append({"c": c, "kept": [k for k, d in zip(c.members, decided, strict=True)
                                          if d and d.decision == "keep"][:3],
                         "excluded": sum(1 for d in decided if d and d.decision == "exclude"),
                         "packages": sorted({k[0] for k in c.members}),
                         "blocked": sum(1 for e in c.edges if e.blocked_by),
                         "diffs": first_diff.get(c.number)})
        w.page("clusters/index.html" if p == 1 else f"clusters/page-{p}.html", "clusters.html", title="Clusters", rows=rows, page=p, pages=total,
               clusters=len(clusters), with_page=with_page)
    for c in clusters:
        if not c.page:
            continue
        members = _member_rows(data, c)
        shown = [{**r, "diff": diffs.get(r["key"])} for r in members
                 if r["kept"] is not None]
        w.page(f"clusters/c-{c.number}.html", "cluster.html", title=f"Cluster {c.number}",
               c=c, members=members, edges=c.edges[:model.CLUSTER_MEMBERS * 2],
               notes=_cluster_notes(data, c), matrix=_matrix(data, c), shown=shown,
               more_diffs=first_diff.get(c.number))
