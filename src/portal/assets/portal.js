// The developer portal's only script (shipped in the binary, no build
// step). It polls /api/health every 2 s and fills the page in with
// textContent (never as markup: names are data, not HTML), draws the two
// charts as inline SVG, and sends the test tools' forms with the
// session's CSRF token.
"use strict";
(function () {
  const csrfMeta = document.querySelector('meta[name="csrf"]');
  if (!csrfMeta) return; // the sign-in page needs no script
  const csrf = csrfMeta.content;
  const $ = (id) => document.getElementById(id);
  const set = (id, v) => { const e = $(id); if (e) e.textContent = v == null ? "–" : String(v); };
  const SVG = "http://www.w3.org/2000/svg";
  let last = null;

  function rows(id, list, cells) {
    const body = $(id);
    if (!body) return;
    body.replaceChildren();
    // Each cell carries its column's name: on a phone a row is a stack of
    // "name: value" lines (portal.css), not columns a letter wide.
    const heads = [...body.closest("table").querySelectorAll("thead th")].map((th) => th.textContent);
    for (const item of list) {
      const tr = document.createElement("tr");
      cells(item).forEach((c, i) => {
        const td = document.createElement("td");
        td.textContent = c == null ? "" : String(c);
        if (heads[i]) td.dataset.label = heads[i];
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    if (list.length === 0) {
      const tr = document.createElement("tr");
      const td = document.createElement("td");
      td.colSpan = 9;
      td.textContent = "none";
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }

  // A line chart of `series` (lists of {x, y}, a `label` each) over the
  // last hour, with both axes ticked and labelled (`opts.unit` on y), a
  // legend, and `limit` as a dashed line at that y (the 3 s window).
  function chart(id, series, opts) {
    const svg = $(id);
    if (!svg) return;
    svg.replaceChildren();
    const W = 600, H = 160, L = 52, B = 24, T = 18;
    const now = Date.now() / 60000;
    const all = series.flatMap((s) => s.points.map((p) => p.y));
    let max = Math.max(2, opts.limit || 0, ...all);
    max = max * 1.1;
    const x = (m) => L + (W - L - 6) * (1 - (now - m) / 60);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    // y: 0, half and the top, with light grid lines; the unit above.
    for (const v of [0, max / 2.2, max / 1.1]) {
      svg.appendChild(el("line", { class: "grid", x1: L, y1: y(v), x2: W - 6, y2: y(v) }));
      svg.appendChild(el("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" }, opts.fmt(v)));
    }
    svg.appendChild(el("text", { x: 2, y: 11 }, opts.unit));
    // x: every 15 minutes, in minutes before now.
    for (const ago of [60, 45, 30, 15, 0]) {
      svg.appendChild(el("line", { class: "grid", x1: x(now - ago), y1: y(0), x2: x(now - ago), y2: y(0) + 4 }));
      svg.appendChild(el("text", { x: x(now - ago), y: H - 6, "text-anchor": "middle" },
        ago ? "\u2212" + ago + " min" : "now"));
    }
    // The legend, top right.
    let lx = W - 6;
    for (const s of series.slice().reverse()) {
      const t = el("text", { x: lx, y: 11, "text-anchor": "end" }, s.label);
      svg.appendChild(t);
      lx -= s.label.length * 6.5 + 6;
      svg.appendChild(el("line", { class: s.cls, x1: lx - 14, y1: 7, x2: lx, y2: 7 }));
      lx -= 22;
    }
    if (opts.limit) {
      svg.appendChild(el("line", { class: "limit", x1: L, y1: y(opts.limit), x2: W - 6, y2: y(opts.limit) }));
      svg.appendChild(el("text", { x: L + 4, y: y(opts.limit) - 3 }, opts.limitLabel));
    }
    for (const s of series) {
      if (s.points.length === 0) continue;
      const d = s.points.map((p, i) => (i ? "L" : "M") + x(p.x).toFixed(1) + " " + y(p.y).toFixed(1)).join(" ");
      svg.appendChild(el("path", { class: s.cls, d: d }));
      for (const p of s.points) svg.appendChild(el("circle", { cx: x(p.x), cy: y(p.y), r: 2.5, class: s.cls }));
    }
  }

  function ms(v) { return v == null ? "–" : v >= 1000 ? (v / 1000).toFixed(1) + " s" : v + " ms"; }
  // "12 s ago", "4 min ago", "2 h 5 min ago".
  function ago(v) {
    return v < 60000 ? Math.round(v / 1000) + " s ago" : hoursMinutes(v) + " ago";
  }
  // "23 h 56 min", "41 min", "under a minute": never "1436 min".
  function hoursMinutes(v) {
    const m = Math.round(v / 60000);
    if (m < 1) return "under a minute";
    const h = Math.floor(m / 60);
    return h ? h + " h " + (m % 60) + " min" : m + " min";
  }

  function render(h) {
    const s = h.sessions;
    set("live", s.live);
    set("degraded", s.degraded);
    set("detached", s.detached);
    const note = $("degraded-note");
    if (s.degraded > 0) {
      note.hidden = false;
      note.textContent = s.degraded + " session(s) degraded: the send queue is at 80 % or more. " +
        "The bot is reading too slowly; at 100 % the session is closed with 4000 (resumable).";
    } else {
      note.hidden = true;
    }
    if (last && h.now_ms > last.now_ms) {
      const rate = Math.max(0, h.events_dispatched - last.events_dispatched) / ((h.now_ms - last.now_ms) / 1000);
      set("events-rate", rate.toFixed(1));
    }
    last = h;
    set("identifies-hour", h.identifies_hour);
    set("resumes-hour", h.resumes_hour);
    rows("by-worker", s.by_worker, (w) => [w.worker, w.live, w.degraded, w.detached]);
    rows("by-shard", s.by_shard, (x) => ["[" + x.shard[0] + ", " + x.shard[1] + "]", x.live, x.degraded]);
    if (h.cluster) cluster(h.cluster);
    const b = h.identify_budget;
    if (b) {
      set("budget-remaining", b.remaining + " of " + b.total);
      // Nothing spent: no window is running, so nothing resets.
      set("budget-reset", b.remaining >= b.total ? "nothing spent" : hoursMinutes(b.reset_after_ms));
      set("budget-concurrency", b.max_concurrency);
    }
    const ix = h.interactions;
    set("ack-rate", ix.ack_rate == null ? null : (ix.ack_rate * 100).toFixed(1) + " %");
    // Estimates: interpolated within the latency bucket (its range shown).
    const est = (q) => {
      const e = ix.ack_latency_estimate_ms && ix.ack_latency_estimate_ms[q];
      if (!e) return null;
      if (e.over_ms != null) return "over " + ms(e.over_ms);
      return "\u2248 " + ms(e.ms) + " (est., in " + e.bucket_ms[0] + "\u2013" + ms(e.bucket_ms[1]) + ")";
    };
    set("ack-p50", est("p50"));
    set("ack-p99", est("p99"));
    set("refused-ix", ix.refused);
    set("misses", ix.misses);
    set("deferrals", ix.deferrals);
    set("late", ix.late_callbacks);
    set("double", ix.double_acks);
    set("opened", ix.opened);
    rows("endpoint-failures", Object.entries(ix.endpoint_failures || {}), (e) => [e[0].replace(/_/g, " "), e[1]]);
    const sr = h.start_refusals || { counts: [], recent: [] };
    const budgetNote = b ? " The budget resets in " + hoursMinutes(b.reset_after_ms) + "." : "";
    rows("start-refusals", sr.counts, (r) => [r.meaning, r.count,
      r.advice + (r.why === "op9_daily_budget" ? budgetNote : "")]);
    rows("start-recent", sr.recent, (r) => [ago(r.ago_ms), r.why.replace(/_/g, " "), r.detail]);
    rows("closes", h.closes_hour, (c) => [c.code || "other", c.count, c.meaning, c.advice]);
    rows("rest", h.rest, (r) => [r.route, r.status || "other", r.count]);
    set("rest-window", "(" + h.rest_window + ")");
    rows("limited", h.rate_limited, (r) => [r.route, r.scope, r.count]);
    chart("chart-ack", [
      { cls: "p50", label: "p50 (est.)", points: h.ack_minutes.filter((m) => m.p50_ms != null).map((m) => ({ x: m.minute, y: Math.min(m.p50_ms, 4000) })) },
      { cls: "p99", label: "p99 (est.)", points: h.ack_minutes.filter((m) => m.p99_ms != null).map((m) => ({ x: m.minute, y: Math.min(m.p99_ms, 4000) })) },
    ], { limit: 3000, limitLabel: "3 s: the person sees a failure", fmt: (v) => ms(Math.round(v)), unit: "ack latency" });
    const dm = h.delivery_minutes || [];
    chart("chart-delivery", [
      { cls: "p50", label: "p50 (est.)", points: dm.filter((m) => m.p50_ms != null).map((m) => ({ x: m.minute, y: Math.min(m.p50_ms, 1200) })) },
      { cls: "p99", label: "p99 (est.)", points: dm.filter((m) => m.p99_ms != null).map((m) => ({ x: m.minute, y: Math.min(m.p99_ms, 1200) })) },
    ], { limit: 800, limitLabel: "800 ms: the node's promise", fmt: (v) => v < 10 ? v.toFixed(2) + " ms" : ms(Math.round(v)), unit: "delivery latency" });
    const rc = h.reconnects || { by_gap: [], windows: [] };
    set("resume-attempts", rc.timed_attempts);
    set("resume-expired", rc.refused_expired);
    rows("reconnect-gaps", rc.by_gap.filter((g) => g.resumes > 0),
      (g) => [g.le_ms == null ? "longer" : ms(g.le_ms), g.resumes]);
    rows("reconnect-windows", rc.windows, (w) => [w.window_s + " s", w.would_refuse,
      w.window_s === rc.window_s ? "this node's window" : ""]);
    chart("chart-sessions", [
      { cls: "line", label: "live sessions (each minute's highest)", points: h.sessions_minutes.map((m) => ({ x: m.minute, y: m.live })) },
    ], { fmt: (v) => String(Math.round(v)), unit: "sessions" });
  }

  // Sessions by node and shard across the cluster; silent nodes are named.
  function cluster(c) {
    const t = c.totals;
    set("c-live", t.live);
    set("c-degraded", t.degraded);
    set("c-detached", t.detached);
    set("c-nodes", t.nodes_answered + " of " + c.nodes.length);
    set("c-identifies-hour", t.identifies_hour);
    set("c-resumes-hour", t.resumes_hour);
    const name = (n) => n.node + (n.this_node ? " (this node)" : "");
    rows("by-node", c.nodes, (n) => n.answered
      ? [name(n), n.live, n.degraded, n.detached, n.identifies_hour, n.resumes_hour,
         n.this_node ? "now" : "answered " + (n.age_ms / 1000).toFixed(1) + " s ago"]
      : [name(n), "?", "?", "?", "?", "?", "no answer: " + n.why]);
    rows("by-node-shard", c.by_node_shard, (x) => [x.node,
      x.shard ? "[" + x.shard[0] + ", " + x.shard[1] + "]" : "other shards", x.live,
      x.degraded == null ? "?" : x.degraded]);
    const note = $("cluster-silent");
    const silent = c.not_answering.map((n) => "node " + n.node + ": " + n.why);
    if (c.registry_error) silent.unshift("the registry did not list the nodes: " + c.registry_error);
    note.hidden = silent.length === 0;
    note.textContent = silent.length
      ? "Not in the totals (no answer within " + c.deadline_ms + " ms): " + silent.join("; ") + ". Their sessions may still be live."
      : "";
    set("cluster-age", "Other nodes' figures as of " + (c.asked_ms_ago / 1000).toFixed(1) + " s ago.");
  }

  async function poll() {
    if (!$("live")) return; // a developer's list of applications: nothing to poll
    try {
      const r = await fetch("/api/health", { credentials: "same-origin", cache: "no-store" });
      if (r.status === 401) { location.href = "/"; return; }
      if (r.ok) render(await r.json());
    } catch (e) { /* the next poll tries again */ }
    setTimeout(poll, 2000);
  }

  async function post(url, form) {
    const body = new URLSearchParams(form ? new FormData(form) : undefined);
    const r = await fetch(url, {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded" },
    });
    return [r.status, await r.json().catch(() => ({ error: "no answer" }))];
  }

  async function follow(id, out) {
    for (let i = 0; i < 50; i++) {
      const r = await fetch("/api/interactions/" + encodeURIComponent(id), { credentials: "same-origin" });
      const v = await r.json().catch(() => ({}));
      const fu = v.followups && v.followups.length ? v.followups[v.followups.length - 1] : null;
      const done = v.state === "answered" || v.state === "failed" || (v.state === "deferred" && fu);
      if (done || i === 49) {
        const shown = fu || v.message;
        let text = "state: " + v.state;
        if (v.latency_ms != null) text += " (" + v.latency_ms + " ms)";
        if (v.failure) text += "\nthe person sees: " + v.failure;
        if (shown) text += "\nthe person sees: " + (shown.content || "(no text)");
        out.textContent = text;
        return;
      }
      await new Promise((res) => setTimeout(res, 200));
    }
  }

  for (const form of document.querySelectorAll("form.tool")) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
      const out = form.querySelector("output");
      out.textContent = "…";
      const [status, v] = await post(form.dataset.api, form);
      if (v.error) { out.textContent = "error (" + status + "): " + v.error; return; }
      if (form.id === "test-message") out.textContent = "sent MESSAGE_CREATE " + v.message_id;
      else if (form.id === "click") { out.textContent = "interaction " + v.interaction_id + " …"; follow(v.interaction_id, out); }
      else if (form.id === "verify") out.textContent = (v.ok ? "OK: " : "FAILED: ") + v.result;
      else if (form.id === "endpoint") {
        out.textContent = (v.ok ? "OK: " : "FAILED: ") + v.result;
        if (v.ok) $("endpoint-url").textContent = v.url || "none: interactions reach the bot over the gateway (INTERACTION_CREATE)";
      }
      else if (form.id === "intents") {
        out.textContent = v.result;
        set("intents-pending", v.pending);
        set("intents-approved", v.approved);
      }
      else if (form.id === "reset") out.textContent = "new token (shown once): " + v.token + "\n" + v.note;
    });
  }
  // The install link: the sum of the checked permission bits.
  const perms = $("install-perms");
  function installLink() {
    let bits = 0;
    for (const c of perms.querySelectorAll("input:checked")) bits += 2 ** Number(c.value);
    const app = perms.dataset.app;
    $("install-bits").textContent = String(bits);
    $("install-link").textContent = "/oauth2/authorize?client_id=" + app +
      "&scope=bot%20applications.commands&permissions=" + bits;
    $("install-cli").textContent = "gatewayd registry install --app " + app +
      " --server <SERVER_ID> --permissions " + bits;
  }
  if (perms) { perms.addEventListener("change", installLink); installLink(); }

  // Sessions one by one: pages follow the session id (`next` is the
  // cursor of the page after); `back` keeps the cursors of the pages
  // before, so Previous returns to exactly those rows. The page shown is
  // refreshed every 5 s.
  const back = [];
  let cursor = "", shownFrom = 1;
  function when(ms) { return new Date(ms).toLocaleTimeString(); }
  async function sessions() {
    try {
      const q = "/api/sessions?limit=50" + (cursor ? "&after=" + cursor : "");
      const r = await fetch(q, { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      const p = await r.json();
      rows("session-list", p.sessions, (s) => [s.session_id, s.node, s.worker,
        s.shard[0] + " / " + s.shard[1], when(s.since_ms),
        s.attached ? (s.heartbeat_age_ms == null ? "–" : ago(s.heartbeat_age_ms)) : "detached",
        s.queue_pct + " %", s.compression, s.resumes]);
      const to = shownFrom + p.sessions.length - 1;
      set("sessions-range", p.sessions.length ? shownFrom + "\u2013" + to + " of " + p.total : "none of " + p.total);
      $("sessions-next").disabled = !p.next;
      $("sessions-next").dataset.cursor = p.next || "";
      $("sessions-prev").disabled = back.length === 0;
      const un = $("sessions-unlisted");
      const notes = p.unlisted.map((u) => "node " + u.node + ": " + u.listed + " of its " + u.held + " sessions listed")
        .concat(p.silent.map((s) => "node " + s.node + " did not answer (" + s.why + ")"));
      un.hidden = notes.length === 0;
      un.textContent = notes.join("; ");
      rows("timeline", p.timeline, (e) => [when(e.at_ms), e.event.replace(/_/g, " "),
        e.code == null ? "" : e.code + " " + e.meaning, e.session_id, e.node]);
    } catch (e) { /* the next refresh tries again */ }
  }
  if ($("session-list")) {
    $("sessions-next").addEventListener("click", () => {
      back.push([cursor, shownFrom]);
      shownFrom += $("session-list").rows.length;
      cursor = $("sessions-next").dataset.cursor;
      sessions();
    });
    $("sessions-prev").addEventListener("click", () => {
      const b = back.pop();
      if (b) { cursor = b[0]; shownFrom = b[1]; }
      sessions();
    });
    sessions();
    setInterval(sessions, 5000);
  }
  poll();
})();
