/* Find a sample: load the data file of its shard with a <script> element (works from file://,
   where fetch() of local files is refused) and show the explanation `report explain` gives.
   Every value is written with textContent: a sample's text never becomes markup. */
(function () {
  "use strict";
  var meta = window.NEAR_DEDUP_META;
  var shards = {};
  var waiting = {};

  window.NEAR_DEDUP_SHARD = function (n, data) {
    shards[n] = data;
    (waiting[n] || []).forEach(function (f) { f(); });
    delete waiting[n];
  };

  var CRC = (function () {
    var t = [];
    for (var n = 0; n < 256; n++) {
      var c = n;
      for (var k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320 ^ (c >>> 1) : c >>> 1;
      t[n] = c >>> 0;
    }
    return t;
  })();

  function crc32(bytes) {
    var c = 0xFFFFFFFF;
    for (var i = 0; i < bytes.length; i++) c = CRC[(c ^ bytes[i]) & 0xFF] ^ (c >>> 8);
    return (c ^ 0xFFFFFFFF) >>> 0;
  }

  function shardOf(pkg, sid) {
    return crc32(new TextEncoder().encode(pkg + "\n" + sid)) % meta.shards;
  }

  function load(n, then) {
    if (shards[n]) { then(); return; }
    if (waiting[n]) { waiting[n].push(then); return; }
    waiting[n] = [then];
    var s = document.createElement("script");
    s.src = "data/samples/" + ("0000" + n).slice(-5) + ".js";
    s.onerror = function () { show(el("p", "notfound", "The data file " + s.src + " could not be loaded.")); };
    document.body.appendChild(s);
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function link(pkg, sid) {
    var a = el("a", "sample", pkg + "/" + sid);
    a.href = "#p=" + encodeURIComponent(pkg) + "&s=" + encodeURIComponent(sid);
    return a;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number" && !Number.isInteger(v)) return v.toFixed(4);
    if (typeof v === "boolean") return v ? "yes" : "no";
    return String(v);
  }

  function jac(v) { return v === null || v === undefined ? "-" : v.toFixed(4); }

  function table(headers, rows) {
    var t = el("table"), head = el("tr");
    headers.forEach(function (h) { head.appendChild(el("th", null, h)); });
    t.appendChild(el("thead")).appendChild(head);
    var body = t.appendChild(el("tbody"));
    rows.forEach(function (r) {
      var tr = body.appendChild(el("tr"));
      r.forEach(function (v) {
        var td = tr.appendChild(el("td"));
        if (v instanceof Node) td.appendChild(v); else td.textContent = fmt(v);
      });
    });
    return t;
  }

  function show(node) {
    var out = document.getElementById("result");
    out.textContent = "";
    out.appendChild(node);
  }

  function partner(p, r) {
    if (r && r.takedown) return el("span", null, "(takedown) " + r.takedown.item);
    if (p.package_id === null) return el("span", null, "(history) content " + String(p.content_id).slice(0, 12) + "…");
    return link(p.package_id, p.sample_id);
  }

  // A partner's own decision as `report explain` prints it: "exclude (near_duplicate of P/S)".
  function outcome(r) {
    if (r.takedown) return "taken down by request " + r.takedown.request_id;
    if (r.partner_decision === null) return "history content (not in the pool)";
    var span = el("span", null, r.partner_decision + " (" + r.partner_reason);
    if (r.partner_kept) {
      span.appendChild(document.createTextNode(" of "));
      span.appendChild(link(r.partner_kept.package_id, r.partner_kept.sample_id));
    }
    span.appendChild(document.createTextNode(")"));
    return span;
  }

  function render(rec) {
    var s = rec, box = el("div", "explanation");
    box.id = "explanation";
    box.appendChild(el("h2", null, s.package_id + "/" + s.sample_id));
    var dl = box.appendChild(el("dl"));
    function row(k, v) {
      dl.appendChild(el("dt", null, k));
      var dd = dl.appendChild(el("dd"));
      if (v instanceof Node) dd.appendChild(v); else dd.textContent = fmt(v);
      return dd;
    }
    row("where", [s.split, s.file ? s.file + ":" + s.line : null, s.domain ? "domain " + s.domain : null].filter(Boolean).join(", "));
    row("source", s.source === null ? "-" : JSON.stringify(s.source));
    var dec = row("decision", "");
    dec.appendChild(el("span", "decision-" + rec.decision, rec.decision));
    dec.appendChild(document.createTextNode(" (" + rec.reason + ")"));
    dec.id = "decision";
    row("why", rec.why).id = "why";
    if (rec.kept) {
      var k = row("kept", link(rec.kept.package_id, rec.kept.sample_id));
      k.id = "kept";
      k.appendChild(document.createTextNode(", jaccard " + jac(rec.jaccard)));
    }
    if (rec.cluster) {
      var c = rec.cluster_page ? el("a", null, "#" + rec.cluster) : el("span", null, "#" + rec.cluster + " (no page of its own)");
      if (rec.cluster_page) c.href = rec.cluster_page;
      row("cluster", c);
    }
    var rels = rec.relations || [];
    box.appendChild(el("h3", null, "relations (" + (rec.relations_total || 0) + ")"));
    if (rels.length) {
      box.appendChild(table(["listed as", "partner", "kind", "jaccard", "history-only", "blocked by", "partner's own decision", "sources"],
        rels.map(function (r) {
          return [r.listed_as, partner(r.partner, r), r.kind, jac(r.jaccard), r.history_only, r.blocked_by, outcome(r),
            r.match_sources.slice(0, 3).map(function (m) { return m.package_id + "/" + m.sample_id; }).join(", ") + (r.match_sources.length > 3 ? " …" : "")];
        })));
      if (rec.relations_total > rels.length) box.appendChild(el("p", "src", "First " + rels.length + " of " + rec.relations_total + "."));
    }
    if (rec.guard) {
      box.appendChild(el("h3", null, "guard-blocked (" + rec.guard.length + ")"));
      box.appendChild(table(["partner", "blocked by", "jaccard", "numbers (this / partner)", "units (this / partner)"],
        rec.guard.map(function (g) {
          var a = g.sequences.sample, b = g.sequences.partner;
          return [partner(g.partner), g.blocked_by, jac(g.jaccard), (a.numbers.join(" ") || "(none)") + "  /  " + (b.numbers.join(" ") || "(none)"),
            (a.units.join(" ") || "(none)") + "  /  " + (b.units.join(" ") || "(none)")];
        })));
    }
    var ex = rec.excluded_because_of_it || [];
    if (ex.length) {
      box.appendChild(el("h3", null, "excluded because of it (" + rec.excluded_total + ")"));
      box.appendChild(table(["sample", "split", "reason", "jaccard"], ex.map(function (x) {
        return [link(x.package_id, x.sample_id), x.split, x.reason, jac(x.jaccard)];
      })));
    }
    if (rec.diff && !rec.diff.lines) {
      var dp = rec.diff, hp = el("h3", null, "text diff: " + dp.partner.package_id + "/" + dp.partner.sample_id + " → this sample (normalized) ");
      var ap = el("a", null, "side by side");
      ap.href = dp.page;
      ap.id = "diff-page";
      hp.appendChild(ap);
      box.appendChild(hp);
    } else if (rec.diff) {
      var d = rec.diff, h = el("h3", null, "text diff: " + d.partner.package_id + "/" + d.partner.sample_id + " [-…-] → this sample {+…+} (" + d.spans + " changed span" + (d.spans === 1 ? "" : "s") + ", normalized) ");
      var a = el("a", null, "side by side");
      a.href = d.page;
      a.id = "diff-page";
      h.appendChild(a);
      box.appendChild(h);
      d.lines.forEach(function (l) {
        var p = box.appendChild(el("div", "spanline"));
        p.appendChild(document.createTextNode(l[0]));
        if (l[1]) p.appendChild(el("del", null, l[1]));
        if (l[2]) p.appendChild(el("ins", null, l[2]));
        p.appendChild(document.createTextNode(l[3]));
      });
      if (!d.lines.length) box.appendChild(el("p", null, "the normalized texts are identical"));
    } else if (rec.kept || rels.length) {
      box.appendChild(el("p", "src", "No text diff precomputed for this sample: near-dedup report explain REPORT " + s.package_id + " " + s.sample_id + " shows it."));
    }
    show(box);
  }

  function find(pkg, sid) {
    if (!sid) return;
    var n = shardOf(pkg, sid);
    load(n, function () {
      var rec = shards[n][pkg + "\n" + sid];
      if (!rec) show(el("p", "notfound", "No sample " + sid + " of package " + pkg + " in this report."));
      else render(rec);
    });
  }

  function fromLocation() {
    var q = new URLSearchParams(location.hash.replace(/^#/, "") || location.search.replace(/^\?/, ""));
    var pkg = q.get("p"), sid = q.get("s");
    if (pkg === null || sid === null) return;
    document.getElementById("package").value = pkg;
    document.getElementById("sample-id").value = sid;
    find(pkg, sid);
  }

  document.getElementById("find").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var pkg = document.getElementById("package").value, sid = document.getElementById("sample-id").value;
    var hash = "#p=" + encodeURIComponent(pkg) + "&s=" + encodeURIComponent(sid);
    if (location.hash === hash) find(pkg, sid); else location.hash = hash;
  });
  window.addEventListener("hashchange", fromLocation);
  fromLocation();
})();
