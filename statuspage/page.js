// The kstate status page: polls ./status (App.Status as JSON) every second
// and answers an operator's first questions at the top. No dependencies, no
// build step; every URL is relative so the page works under any mount prefix.
"use strict";
(function () {
  const POLL_MS = 1000;
  const FETCH_TIMEOUT_MS = 3000;
  const WINDOW_MS = 5 * 60 * 1000; // chart history kept in the browser
  const SVGNS = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat("en-US");
  const int = (n) => nf.format(Math.round(n));

  // dur formats nanoseconds for people.
  function dur(ns) {
    const s = ns / 1e9;
    if (s < 0.001) return "< 1 ms";
    if (s < 1) return Math.round(ns / 1e6) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.round((s % 86400) / 3600) + " h";
  }
  const ago = (ms) => dur(Math.max(ms, 0) * 1e6) + " ago";
  // A Go time.Time in JSON (RFC 3339); absent or the zero time: null.
  function when(v) {
    if (!v) return null;
    const t = Date.parse(v);
    return isNaN(t) || t <= 0 ? null : t;
  }
  // clock is a local time: HH:MM:SS today, else YYYY-MM-DD HH:MM:SS.
  function clock(t) {
    const d = new Date(t), p2 = (n) => String(n).padStart(2, "0");
    const hms = p2(d.getHours()) + ":" + p2(d.getMinutes()) + ":" + p2(d.getSeconds());
    if (d.toDateString() === new Date().toDateString()) return hms;
    return d.getFullYear() + "-" + p2(d.getMonth() + 1) + "-" + p2(d.getDate()) + " " + hms;
  }
  const plural = (n, one, many) => int(n) + " " + (n === 1 ? one : many || one + "s");
  function rate(r) {
    if (r >= 100) return int(r);
    return r.toFixed(r >= 10 ? 1 : 2);
  }

  function text(id, s) { $(id).textContent = s; }
  function tone(cardId, t) { $(cardId).className = "card" + ($(cardId).classList.contains("wide") ? " wide" : "") + (t ? " " + t : ""); }
  function el(tag, cls, content) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined) e.textContent = content;
    return e;
  }

  // ---- the summary cards ----

  function summary(st) {
    const parts = st.partitions || [];
    const restoring = parts.filter((p) => p.restoring);
    const state = st.state;
    const stopped = state === "Stopped" || state === "Failed";
    document.title = "kstate · " + st.application_id + " · " + state;
    text("app-id", st.application_id);
    text("instance-id", st.instance_id);

    // Caught up? Total lag, -1 (or absent) when unknown.
    const lag = typeof st.lag === "number" ? st.lag : -1;
    if (parts.length === 0) {
      text("caught-up", stopped ? "No: not running" : "No partitions");
      text("caught-up-detail", "nothing assigned to this instance");
      tone("card-caught-up", stopped ? "bad" : "warn");
    } else if (lag < 0) {
      text("caught-up", "Lag unknown");
      text("caught-up-detail", "no lag measured yet");
      tone("card-caught-up", "");
    } else if (lag === 0) {
      text("caught-up", "Yes");
      text("caught-up-detail", "lag 0 on " + plural(parts.length, "partition"));
      tone("card-caught-up", "ok");
    } else {
      text("caught-up", "No: " + int(lag) + " behind");
      const worst = parts.reduce((a, p) => (p.lag > (a ? a.lag : -1) ? p : a), null);
      text("caught-up-detail", "input records not consumed yet" + (worst ? "; most on partition " + worst.partition + " (" + int(worst.lag) + ")" : ""));
      tone("card-caught-up", "warn");
    }
    // Not caught up, whatever this instance's lag, while partitions of the
    // group have no owner: nothing processes them.
    const unowned = (st.group && st.group.unowned) || [];
    if (!stopped && unowned.length > 0) {
      const own = $("caught-up-detail").textContent;
      text("caught-up", "No: " + plural(unowned.length, "partition") + " unowned");
      text("caught-up-detail", (unowned.length === 1 ? "partition " : "partitions ") + unowned.join(", ") + " of the group " +
        (unowned.length === 1 ? "has" : "have") + " no owner: nothing processes them; this instance: " + own);
      tone("card-caught-up", "bad");
    }

    // Restoring? Partitions and records done/total.
    if (restoring.length === 0) {
      text("restoring", "No");
      text("restoring-detail", parts.length ? "all " + parts.length + " partition" + (parts.length === 1 ? "" : "s") + " processing" : "—");
      tone("card-restoring", parts.length ? "ok" : "");
    } else {
      const done = restoring.reduce((a, p) => a + (p.restored_records || 0), 0);
      const total = restoring.reduce((a, p) => a + (p.restore_total || 0), 0);
      const allKnown = restoring.every((p) => p.restore_total > 0);
      text("restoring", "Yes: " + restoring.length + " of " + parts.length + " partition" + (parts.length === 1 ? "" : "s"));
      text("restoring-detail", allKnown
        ? int(done) + " of " + int(total) + " changelog records (" + Math.min(100, Math.floor((100 * done) / total)) + "%)"
        : int(done) + " changelog records so far, total unknown");
      tone("card-restoring", "info");
    }

    // Ready as App.Ready decides (an older kstate sends no ready_reason:
    // Running then means ready).
    const ready = st.ready_reason ? !!st.ready : state === "Running";
    const lost = st.ready_reason && st.ready_reason.includes("Kafka unreachable");

    // Ready in: the slowest restoring partition's ETA.
    if (lost) {
      text("ready-in", "When Kafka answers");
      text("ready-in-detail", st.ready_reason);
      tone("card-ready-in", "bad");
    } else if (state === "Running") {
      text("ready-in", "Ready now");
      text("ready-in-detail", "every assigned partition is processing");
      tone("card-ready-in", "ok");
    } else if (stopped) {
      text("ready-in", "Never");
      text("ready-in-detail", "Run returned (" + state + ")");
      tone("card-ready-in", "bad");
    } else if (restoring.length > 0) {
      const etas = restoring.map((p) => p.restore_eta_ns || 0);
      if (etas.some((e) => e <= 0)) {
        text("ready-in", "Unknown");
        text("ready-in-detail", "restoring; no restore rate measured yet");
      } else {
        text("ready-in", "About " + dur(Math.max(...etas)));
        text("ready-in-detail", "at the current restore rate of the slowest partition");
      }
      tone("card-ready-in", "info");
    } else {
      text("ready-in", "Not yet");
      text("ready-in-detail", "state " + state);
      tone("card-ready-in", "warn");
    }

    // State, live (as App.Live decides) and ready (as App.Ready).
    text("state", state);
    const half = (st.max_batch_duration_ns || 0) / 2;
    const stuck = half > 0 && (st.batch_in_flight_ns || 0) >= half;
    text("live", stopped ? "no" : stuck ? "no (stuck: batch in flight " + dur(st.batch_in_flight_ns) + ")" : "yes");
    text("ready", ready ? "yes" : lost ? "no (Kafka unreachable)" : "no");
    tone("card-state", state === "Running" ? (stuck || lost ? "bad" : "ok") : stopped ? "bad" : state === "Restoring" ? "info" : "warn");

    // Batch in flight: its age, records and partitions (the lag counts its
    // records until it commits).
    const age = st.batch_in_flight_ns || 0;
    if (age > 0) {
      const inBatch = parts.filter((p) => p.in_batch).map((p) => p.partition);
      text("batch", dur(age));
      text("batch-detail", plural(st.batch_in_flight_records || 0, "record") +
        (inBatch.length ? " on partition" + (inBatch.length === 1 ? " " : "s ") + inBatch.join(", ") : "") +
        (half > 0 ? "; given up at " + dur(2 * half) : ""));
      tone("card-batch", stuck ? "bad" : half > 0 && age >= half / 2 ? "warn" : "");
    } else {
      text("batch", stopped ? "None" : "None now");
      text("batch-detail", stopped ? "Run returned" : "between batches");
      tone("card-batch", "");
    }

    // Last commit.
    const lastCommit = when(st.last_commit_at);
    if (st.since_last_commit_ns > 0) {
      text("last-commit", dur(st.since_last_commit_ns) + " ago");
      text("last-commit-detail", (lastCommit ? "at " + clock(lastCommit) + " · " : "") + plural(st.total.Commits, "commit") + ", " + plural(st.total.Aborts, "abort"));
      tone("card-last-commit", stuck ? "bad" : "");
    } else {
      text("last-commit", "None yet");
      text("last-commit-detail", "no transaction committed since Run started");
      tone("card-last-commit", "");
    }

    // Last error (or Run's error).
    const msg = st.last_error || st.error || "";
    const at = when(st.last_error_at);
    if (msg) {
      text("last-error", msg);
      text("last-error-detail", (at ? ago(Date.now() - at) + " (at " + clock(at) + ")" : "time unknown") + errorCounts(st.total));
      tone("card-last-error", st.error ? "bad" : "warn");
    } else {
      text("last-error", "None");
      text("last-error-detail", errorCounts(st.total).replace(/^ · /, ""));
      tone("card-last-error", "");
    }
  }

  function errorCounts(t) {
    const c = [["Aborts", "abort"], ["DecodeErrors", "decode error"], ["ProcessingErrors", "processing error"], ["DeadLettered", "record dead-lettered", "records dead-lettered"]]
      .filter(([k]) => t && t[k] > 0).map(([k, one, many]) => plural(t[k], one, many));
    return c.length ? " · " + c.join(", ") : "";
  }

  // ---- the partitions table ----

  function partitions(st) {
    const parts = st.partitions || [];
    text("partition-count", "(" + parts.length + ")");
    $("no-partitions").hidden = parts.length > 0;
    $("partitions").hidden = parts.length === 0;
    // The pipeline column only when partitions are spread over several
    // pipelines (Config.Pipelines > 1).
    const pipelines = parts.some((p) => (p.pipeline || 0) > 0 || typeof p.handover_to === "number");
    $("pipeline-col").hidden = !pipelines;
    const rows = parts.map((p) => {
      const tr = el("tr");
      tr.id = "partition-" + p.partition;
      tr.dataset.partition = p.partition;
      tr.dataset.phase = p.restoring ? "restoring" : "processing";
      const th = el("th", null, String(p.partition));
      th.scope = "row";
      tr.append(th);
      const phase = el("td");
      phase.append(el("span", "phase " + tr.dataset.phase, tr.dataset.phase));
      if (p.in_batch) {
        tr.dataset.inBatch = "true";
        phase.append(el("span", "phase in-batch", "in batch"));
      }
      if (typeof p.handover_to === "number") {
        // Handed over to another pipeline of this instance, which
        // restores it while this one ends its batch.
        tr.dataset.handoverTo = p.handover_to;
        phase.append(el("span", "phase handover", "moving to pipeline " + p.handover_to));
      }
      tr.append(phase, restoreCell(p));
      tr.append(p.lag >= 0 ? el("td", "num", int(p.lag)) : el("td", "num unknown", "unknown"));
      tr.append(el("td", "num", String(p.batch_id)));
      tr.append(watermarkCell(p.watermark));
      const c = p.counters || {};
      tr.append(el("td", "num", int(c.RowsIn || 0)), el("td", "num", int(c.RowsOut || 0)));
      if (pipelines) {
        tr.append(el("td", "num pipeline", String(p.pipeline || 0)));
      }
      return tr;
    });
    $("partition-rows").replaceChildren(...rows);
  }

  function restoreCell(p) {
    const td = el("td");
    const box = el("div", "restore");
    const done = p.restored_records || 0;
    const total = p.restore_total || 0;
    if (p.restoring) {
      const bar = el("progress");
      bar.setAttribute("aria-label", "restore of partition " + p.partition);
      if (total > 0) { // else indeterminate
        bar.max = total;
        bar.value = Math.min(done, total);
      }
      const bits = [total > 0 ? int(done) + " / " + int(total) : int(done) + " / ?"];
      bits.push(p.restore_rate > 0 ? rate(p.restore_rate) + " rec/s" : "rate unknown");
      bits.push(p.restore_eta_ns > 0 ? "ETA " + dur(p.restore_eta_ns) : "ETA unknown");
      box.append(bar, el("span", null, bits.join(" · ")));
    } else if (done > 0) {
      box.append(el("span", null, "restored " + int(done) + " records"));
    } else {
      box.append(el("span", null, "—"));
    }
    td.append(box);
    return td;
  }

  function watermarkCell(ms) {
    if (typeof ms !== "number" || ms < 0) return el("td", "unknown", "none");
    const td = el("td", null, new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC"));
    td.title = ms + " ms";
    return td;
  }

  // ---- the group, as this instance's last assignment described it ----

  const list = (ps) => (ps && ps.length ? ps.join(", ") : "—");
  function lagOf(m, p) {
    const l = m.lag && m.lag[p];
    return typeof l === "number" ? " (lag " + int(l) + ")" : "";
  }
  function memberName(m) {
    return m.instance_id + (m.local ? " (this instance)" : "");
  }

  function groupView(st) {
    const g = st.group;
    $("group").hidden = !g;
    if (!g) return;
    const members = g.members || [];
    const view = members.length > 0;
    const leader = g.leader ? " · leader " + g.leader : "";
    text("group-summary", view
      ? "(generation " + g.generation + " · " + plural(members.length, "member") + " · " + plural(g.partitions, "partition") + leader + ")"
      : "(no view)");
    $("group-no-view").hidden = view;
    $("group-partitions-wrap").hidden = !view;
    $("group-members-wrap").hidden = !view;
    const unowned = g.unowned || [];
    $("group-unowned").hidden = unowned.length === 0;
    text("group-unowned", unowned.length === 0 ? "" : "Unowned: " + (unowned.length === 1 ? "partition " : "partitions ") + unowned.join(", ") +
      (unowned.length === 1 ? " has" : " have") + " no owner; nothing processes " + (unowned.length === 1 ? "it" : "them") + " until a member takes " +
      (unowned.length === 1 ? "it" : "them") + " over.");

    // One row per partition: its owner, standbys and warm-ups.
    const rows = [];
    for (let p = 0; p < (g.partitions || 0); p++) {
      const tr = el("tr");
      tr.dataset.partition = p;
      const th = el("th", null, String(p));
      th.scope = "row";
      tr.append(th);
      const owner = members.find((m) => (m.active || []).includes(p));
      const td = el("td");
      if (owner) {
        td.textContent = memberName(owner);
      } else {
        tr.classList.add("unowned");
        td.append(el("span", "phase unowned", "unowned"));
      }
      const standbys = members.filter((m) => (m.standby || []).includes(p)).map((m) => memberName(m) + lagOf(m, p));
      const warm = members.filter((m) => (m.warmup || []).includes(p)).map((m) => memberName(m) + lagOf(m, p) + ": moves when caught up");
      tr.append(td, el("td", null, standbys.join(", ") || "—"), el("td", null, warm.join(", ") || "—"));
      rows.push(tr);
    }
    $("group-partition-rows").replaceChildren(...rows);

    $("group-member-rows").replaceChildren(...members.map((m) => {
      const tr = el("tr");
      const th = el("th", null, memberName(m));
      th.scope = "row";
      tr.append(th, el("td", null, m.process || "—"), m.url ? el("td", null, m.url) : el("td", "unknown", "none"),
        el("td", null, list(m.active)), el("td", null, list(m.standby)), el("td", null, list(m.warmup)));
      return tr;
    }));

    const rbs = g.rebalances || [];
    $("group-no-rebalances").hidden = rbs.length > 0;
    $("group-rebalances").hidden = rbs.length === 0;
    $("group-rebalance-rows").replaceChildren(...rbs.map((r) => {
      const tr = el("tr");
      const start = when(r.start);
      tr.append(el("td", "num", String(r.generation)), start ? el("td", null, clock(start)) : el("td", "unknown", "unknown"),
        el("td", "num", dur(r.duration_ns || 0)), el("td", null, list(r.assigned)), el("td", null, list(r.revoked)),
        el("td", null, r.leader ? "yes" : "no"));
      return tr;
    }));
  }

  // ---- charts: samples of rates derived from counter deltas ----

  const samples = []; // {t, in, out, lat} with lat null when no commit in the interval
  let prev = null; // {t, total}

  function sample(st) {
    const t = Date.now();
    const tot = st.total || {};
    if (prev && tot.RowsIn >= prev.total.RowsIn && tot.Commits >= prev.total.Commits && t > prev.t) {
      const secs = (t - prev.t) / 1000;
      const dc = tot.Commits - prev.total.Commits;
      samples.push({
        t,
        in: (tot.RowsIn - prev.total.RowsIn) / secs,
        out: Math.max(0, tot.RowsOut - prev.total.RowsOut) / secs,
        lat: dc > 0 ? (tot.CommitLatency - prev.total.CommitLatency) / dc / 1e6 : null,
      });
    } else if (prev) {
      samples.push({ t, gap: true }); // counters went back: a new Run
    }
    prev = { t, total: tot };
    while (samples.length && samples[0].t < t - WINDOW_MS) samples.shift();
    const last = samples.length ? samples[samples.length - 1] : null;
    text("rate-in", last && !last.gap ? rate(last.in) : "…");
    text("rate-out", last && !last.gap ? rate(last.out) : "…");
    const lats = samples.filter((s) => !s.gap && s.lat !== null);
    text("commit-latency", lats.length ? lats[lats.length - 1].lat.toFixed(1) + " (last)" : "no commits yet");
    draw($("chart-throughput"), t, [["in", "in"], ["out", "out"]], "/s");
    draw($("chart-latency"), t, [["lat", "lat"]], " ms");
  }

  // draw renders series (sample field, css class) of the samples into an SVG
  // of 600x140 user units: a y scale from 0 to a rounded maximum, x from
  // WINDOW_MS ago to now; gaps (no data, or a disconnect) break the lines.
  function draw(svg, now, series, unit) {
    const W = 600, H = 140, L = 46, R = 8, T = 8, B = 20;
    let max = 0;
    for (const s of samples) for (const [f] of series) if (!s.gap && s[f] !== null && s[f] > max) max = s[f];
    max = nice(max);
    // The x axis spans the history kept: from 1 minute, growing to WINDOW_MS.
    const span = Math.min(WINDOW_MS, Math.max(60 * 1000, samples.length ? now - samples[0].t : 0));
    const x = (t) => L + ((t - (now - span)) / span) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    const nodes = [];
    for (let i = 0; i <= 2; i++) {
      const v = (max * i) / 2;
      nodes.push(svgEl("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      nodes.push(svgEl("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" }, short(v) + (i === 2 ? unit : "")));
    }
    nodes.push(svgEl("text", { x: L, y: H - 4 }, dur(span * 1e6).replace(/ 0 s$/, "") + " ago"));
    nodes.push(svgEl("text", { x: W - R, y: H - 4, "text-anchor": "end" }, "now"));
    for (const [f, cls] of series) {
      let run = [];
      const flush = () => {
        if (run.length === 1) nodes.push(svgEl("circle", { class: "dot " + cls, cx: run[0][0], cy: run[0][1], r: 2 }));
        if (run.length > 1) nodes.push(svgEl("polyline", { class: cls, points: run.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ") }));
        run = [];
      };
      for (const s of samples) {
        if (s.gap || s[f] === null) { flush(); continue; }
        run.push([x(s.t), y(s[f])]);
      }
      flush();
    }
    svg.replaceChildren(...nodes);
  }

  function nice(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }
  function short(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + "k";
    return v % 1 ? v.toFixed(1) : String(v);
  }
  function svgEl(tag, attrs, content) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (content !== undefined) e.textContent = content;
    return e;
  }

  // ---- polling and the connection state ----

  let lastOK = 0;

  function connected() {
    $("disconnected").hidden = true;
    $("data").hidden = false;
    const c = $("conn");
    c.classList.remove("down");
    c.textContent = "connected · updated " + new Date(lastOK).toLocaleTimeString(undefined, { hour12: false });
  }

  // disconnected hides every number: no stale data is shown as current.
  function disconnected(err) {
    $("data").hidden = true;
    $("disconnected").hidden = false;
    text("disconnected-reason", err && err.message ? err.message : String(err));
    text("disconnected-since", lastOK ? "Last data " + ago(Date.now() - lastOK) + "." : "No data received yet.");
    const c = $("conn");
    c.classList.add("down");
    c.textContent = "disconnected";
    document.title = "kstate · disconnected";
    if (prev) samples.push({ t: Date.now(), gap: true });
    prev = null; // no rate across the gap
  }

  // poll fetches the status once and schedules the next poll. A failed
  // fetch or an answer that is not a status means disconnected; an error
  // in rendering is a bug of this page and is thrown (to the console).
  async function poll() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error("no answer within " + FETCH_TIMEOUT_MS / 1000 + " s")), FETCH_TIMEOUT_MS);
    let st;
    try {
      const resp = await fetch("status", { cache: "no-store", signal: ctl.signal });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      st = await resp.json();
      if (!st || typeof st.state !== "string") throw new Error("not a kstate status");
    } catch (err) {
      disconnected(err);
      return;
    } finally {
      clearTimeout(timer);
      setTimeout(poll, POLL_MS);
    }
    lastOK = Date.now();
    summary(st);
    partitions(st);
    groupView(st);
    sample(st);
    connected();
  }

  poll();
})();
