// rlvr report: curves, legend and hover as inline SVG, and a browser over sampled completions.
// Written for this page (no library); reads the JSON in #report-data, fetches nothing.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const RUNS = DATA.runs;
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d",
    "#4b5563", "#ca8a04"];
  const DASHES = ["", "6 3", "2 3", "9 3 2 3", "1 3", "12 4"];
  const W = 520, H = 250, M = { l: 56, r: 12, t: 10, b: 30 };

  // ------------------------------------------------------------------ DOM helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function sv(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
  }
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);
  const colorOf = (i) => COLORS[i % COLORS.length];
  const dashOf = (i) => DASHES[i % DASHES.length];

  // ------------------------------------------------------------------ number formatting and scales
  function fmt(v, percent) {
    if (!isNum(v)) return "–";
    if (percent) {
      const p = v * 100;
      return (Math.abs(p - Math.round(p)) < 1e-9 ? p.toFixed(0) : p.toFixed(1)) + "%";
    }
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a < 1e-3) return v.toExponential(1);
    return String(Number(v.toPrecision(a >= 100 ? 5 : 3)));
  }
  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    let step = Math.pow(10, Math.floor(Math.log10(span / count)));
    const err = (count / span) * step;
    if (err <= 0.15) step *= 10;
    else if (err <= 0.35) step *= 5;
    else if (err <= 0.75) step *= 2;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
    return ticks;
  }
  function extent(values) { // a loop, not Math.min(...values): long runs exceed the argument limit
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    return [lo, hi];
  }
  function domain(values, percent) {
    let [lo, hi] = extent(values);
    const [min, max] = [lo, hi];
    if (lo === hi) {
      const pad = percent ? 0.05 : Math.abs(lo) * 0.1 || 1;
      lo -= pad;
      hi += pad;
    } else {
      const pad = (hi - lo) * 0.06;
      lo -= pad;
      hi += pad;
    }
    if (percent) {
      lo = Math.max(lo, Math.min(min, 0));
      hi = Math.min(hi, Math.max(max, 1));
    }
    return [lo, hi];
  }
  function ema(values, alpha) {
    let last = null;
    return values.map((v) => {
      if (!isNum(v)) return null;
      last = last === null ? v : alpha * last + (1 - alpha) * v;
      return last;
    });
  }

  // ------------------------------------------------------------------ charts
  function shortKey(key, keys) { // without the longest "a/b/" prefix that all the panel's keys share
    if (keys.length < 2) return key;
    let prefix = key.slice(0, key.lastIndexOf("/") + 1);
    while (prefix && !keys.every((k) => k.startsWith(prefix))) prefix = prefix.slice(0, prefix.lastIndexOf("/", prefix.length - 2) + 1);
    return key.slice(prefix.length) || key;
  }
  function panelSeries(panel) {
    const out = [];
    RUNS.forEach((run, r) => {
      const cols = run[panel.source] || {};
      panel.keys.forEach((key, k) => {
        const ys = cols[key];
        if (!ys || !ys.some(isNum)) return;
        const label = (RUNS.length > 1 ? run.name + " · " : "") + shortKey(key, panel.keys);
        out.push({
          run: r, key, label, xs: cols.step, ys, phases: panel.source === "eval" ? cols.phase : null,
          color: RUNS.length > 1 ? colorOf(r) : colorOf(k),
          dash: RUNS.length > 1 ? dashOf(k) : "",
        });
      });
    });
    return out;
  }
  function pathData(xs, ys, sx, sy) {
    let d = "", pen = false;
    for (let i = 0; i < xs.length; i++) {
      if (!isNum(ys[i]) || !isNum(xs[i])) { pen = false; continue; }
      d += (pen ? "L" : "M") + sx(xs[i]).toFixed(1) + "," + sy(ys[i]).toFixed(1);
      pen = true;
    }
    return d;
  }
  function drawChart(panel, smoothing) {
    const box = el("div", { class: "panel", id: "panel-" + panel.id, "data-keys": panel.keys.join(" ") });
    box.append(el("h3", { text: panel.title }));
    const series = panelSeries(panel);
    if (!series.length) {
      box.append(el("div", { class: "empty", text: "no values logged" }));
      return box;
    }
    const xsAll = [], ysAll = [];
    for (const s of series) s.xs.forEach((x, i) => { if (isNum(s.ys[i]) && isNum(x)) { xsAll.push(x); ysAll.push(s.ys[i]); } });
    let [x0, x1] = extent(xsAll);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const [y0, y1] = domain(ysAll, panel.percent);
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r);
    const sy = (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": panel.title });
    const grid = sv("g", { class: "grid" }), axis = sv("g", { class: "axis" });
    for (const t of niceTicks(y0, y1, 5)) {
      grid.append(sv("line", { x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t) }));
      axis.append(sv("text", { x: M.l - 6, y: sy(t) + 3, "text-anchor": "end" }, fmt(t, panel.percent)));
    }
    for (const t of niceTicks(x0, x1, 6).filter((t) => Number.isInteger(t))) {
      axis.append(sv("text", { x: sx(t), y: H - M.b + 14, "text-anchor": "middle" }, String(t)));
    }
    axis.append(sv("text", { x: (M.l + W - M.r) / 2, y: H - 2, "text-anchor": "middle" }, "step"));
    svg.append(grid, axis, sv("rect", { class: "frame", x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b }));
    for (const s of series) {
      const n = s.ys.filter(isNum).length;
      const smooth = panel.source === "train" && smoothing > 0 && n > 5;
      if (smooth) {
        svg.append(sv("path", { class: "raw", d: pathData(s.xs, s.ys, sx, sy), stroke: s.color }));
      }
      const ys = smooth ? ema(s.ys, smoothing) : s.ys;
      svg.append(sv("path", {
        class: "series", d: pathData(s.xs, ys, sx, sy), stroke: s.color, "stroke-dasharray": s.dash || null,
        "data-points": n, "data-run": RUNS[s.run].name, "data-key": s.key,
      }));
      if (!smooth && (panel.source === "eval" || n <= 40)) {
        const dots = sv("g", { class: "points" });
        s.xs.forEach((x, i) => {
          if (!isNum(s.ys[i]) || !isNum(x)) return;
          const title = sv("title", {}, `${s.label}: ${fmt(s.ys[i], panel.percent)} at step ${x}` +
            (s.phases ? ` (${s.phases[i]})` : ""));
          dots.append(sv("circle", { cx: sx(x), cy: sy(s.ys[i]), r: panel.source === "eval" ? 3 : 2, fill: s.color }));
          dots.lastChild.append(title);
        });
        svg.append(dots);
      }
    }
    box.append(svg);
    addHover(box, svg, panel, series, sx, x0, x1);
    const legend = el("div", { class: "legend" });
    for (const s of series) {
      const sample = sv("svg", { width: 22, height: 8 });
      sample.append(sv("line", { x1: 1, x2: 21, y1: 4, y2: 4, stroke: s.color, "stroke-width": 2,
        "stroke-dasharray": s.dash || null }));
      legend.append(el("span", { class: "legend-item" }, sample, s.label));
    }
    box.append(legend);
    return box;
  }
  function addHover(box, svg, panel, series, sx, x0, x1) {
    const tip = el("div", { class: "tooltip" });
    const guide = sv("line", { class: "guide", y1: M.t, y2: H - M.b, visibility: "hidden" });
    svg.append(guide);
    box.append(tip);
    const steps = [...new Set(series.flatMap((s) => s.xs.filter((x, i) => isNum(s.ys[i]))))].sort((a, b) => a - b);
    svg.addEventListener("mousemove", (event) => {
      const rect = svg.getBoundingClientRect();
      const x = x0 + (((event.clientX - rect.left) / rect.width) * W - M.l) / (W - M.l - M.r) * (x1 - x0);
      let best = steps[0];
      for (const s of steps) if (Math.abs(s - x) < Math.abs(best - x)) best = s;
      guide.setAttribute("x1", sx(best));
      guide.setAttribute("x2", sx(best));
      guide.setAttribute("visibility", "visible");
      tip.replaceChildren(el("div", {}, el("b", { text: "step " + best })));
      for (const s of series) {
        const i = s.xs.lastIndexOf(best);
        if (i < 0 || !isNum(s.ys[i])) continue;
        tip.append(el("div", {}, el("span", { class: "swatch", style: `background:${s.color}` }),
          `${s.label}: ${fmt(s.ys[i], panel.percent)}` + (s.phases ? ` (${s.phases[i]})` : "")));
      }
      tip.style.display = "block";
      const bx = box.getBoundingClientRect();
      const left = event.clientX - bx.left + 14;
      tip.style.left = Math.min(left, bx.width - tip.offsetWidth - 4) + "px";
      tip.style.top = event.clientY - bx.top + 10 + "px";
    });
    svg.addEventListener("mouseleave", () => {
      tip.style.display = "none";
      guide.setAttribute("visibility", "hidden");
    });
  }
  function drawCharts() {
    const smoothing = Number(document.getElementById("smoothing").value);
    const main = document.getElementById("panels"), other = document.getElementById("panels-other");
    main.replaceChildren();
    other.replaceChildren();
    for (const panel of DATA.panels) (panel.section === "other" ? other : main).append(drawChart(panel, smoothing));
    document.getElementById("other-metrics").hidden = !other.children.length;
  }
  function drawRunsLegend() {
    const box = document.getElementById("runs-legend");
    RUNS.forEach((run, r) => {
      const line = el("div", { class: "run" });
      if (RUNS.length > 1) line.append(el("span", { class: "swatch", style: `background:${colorOf(r)}` }));
      line.append(el("b", { text: run.name }), " ", el("span", { class: "muted", text: run.summary }));
      for (const note of run.notes) line.append(el("div", { class: "muted", text: note }));
      box.append(line);
    });
    document.querySelectorAll(".run-tables").forEach((section) => {
      const swatch = section.querySelector(".swatch");
      if (swatch) swatch.style.background = RUNS.length > 1 ? colorOf(Number(section.dataset.run)) : "transparent";
    });
  }

  // ------------------------------------------------------------------ rollout browser
  const PAGE = 20;
  const state = { run: 0, source: "train", step: "all", group: "all", rmin: "", rmax: "", errors: false,
    text: "", colour: "advantage", page: 0 };

  function normalise(row, source) {
    const evalRow = source === "eval";
    return {
      step: row.step, phase: row.phase, id: evalRow ? row.id : row.example_id, group: row.group, role: row.role,
      prompt: evalRow ? row.question : row.prompt, reference: row.reference, completion: row.completion || "",
      reward: evalRow ? row.score : row.reward, rewards: row.rewards || {}, errors: row.errors || {},
      advantage: row.advantage, finish: row.finish_reason, correct: row.correct, conversation: row.conversation,
      tokens: row.token_text, logprobs: row.token_logprobs, advantages: row.token_advantages,
      images: Array.isArray(row.images) ? row.images : [],
    };
  }
  function rows() {
    const run = RUNS[state.run];
    return (state.source === "eval" ? run.evalSamples : run.samples).map((r) => normalise(r, state.source));
  }
  function filtered(all) {
    const lo = state.rmin === "" ? null : Number(state.rmin), hi = state.rmax === "" ? null : Number(state.rmax);
    const text = state.text.toLowerCase();
    return all.filter((r) => {
      if (state.step !== "all" && String(r.step) !== state.step) return false;
      if (state.group !== "all" && String(r.group ?? "") !== state.group) return false;
      if (lo !== null && !(isNum(r.reward) && r.reward >= lo)) return false;
      if (hi !== null && !(isNum(r.reward) && r.reward <= hi)) return false;
      if (state.errors && !Object.keys(r.errors).length) return false;
      if (text && ![r.prompt, r.completion, r.reference, r.id, r.role].some((s) => String(s ?? "").toLowerCase().includes(text))) return false;
      return true;
    });
  }
  function advantageScale(all) {
    let m = 0;
    for (const r of all) {
      if (isNum(r.advantage)) m = Math.max(m, Math.abs(r.advantage));
      for (const a of r.advantages || []) if (isNum(a)) m = Math.max(m, Math.abs(a));
    }
    return m || 1;
  }
  function tokenStyle(value, mode, scale) {
    if (!isNum(value)) return "";
    if (mode === "advantage") {
      const t = Math.min(1, Math.abs(value) / scale);
      if (t === 0) return "";
      const rgb = value > 0 ? "22,163,74" : "220,38,38";
      return `background: rgba(${rgb},${(0.1 + 0.55 * t).toFixed(3)})`;
    }
    const t = Math.min(1, -value / 5); // surprise in nats, full colour at 5 nats (p ≈ 0.7%)
    return t > 0 ? `background: rgba(234,88,12,${(0.6 * t).toFixed(3)})` : "";
  }
  function completionNode(r, scale) {
    const box = el("div", { class: "completion" });
    if (!Array.isArray(r.tokens) || state.colour === "none") {
      box.textContent = r.completion;
      return box;
    }
    r.tokens.forEach((piece, i) => {
      const lp = r.logprobs ? r.logprobs[i] : null;
      const context = r.logprobs && lp === null;
      const adv = r.advantages ? r.advantages[i] : (context ? null : r.advantage);
      const value = state.colour === "advantage" ? adv : lp;
      const title = context ? "context (not sampled, not trained on)"
        : `logprob ${fmt(lp)} (p=${isNum(lp) ? Math.exp(lp).toFixed(3) : "–"})` +
          (isNum(adv) ? ` · advantage ${adv.toFixed(3)}` : " · no advantage (group not trained on)");
      box.append(el("span", { class: "tok" + (context ? " ctx" : ""), style: context ? null : tokenStyle(value, state.colour, scale) || null,
        title, "data-i": i }, piece));
    });
    return box;
  }
  function sampleCard(r, scale) {
    const meta = el("div", { class: "meta" });
    const add = (label, value, cls) => meta.append(el("span", { class: cls || null }, label + " ", el("b", { text: value })));
    add("step", String(r.step ?? "–"));
    if (r.phase) add("eval", r.phase);
    if (r.group !== undefined && r.group !== "") add("group", String(r.group));
    if (r.role) add("role", String(r.role));
    if (r.id) add("example", String(r.id));
    add(state.source === "eval" ? "score" : "reward", fmt(r.reward));
    if (r.correct !== undefined) meta.append(el("span", { class: r.correct ? "ok" : "bad", text: r.correct ? "correct" : "wrong" }));
    for (const [name, value] of Object.entries(r.rewards)) add(name, fmt(value));
    if (state.source !== "eval") add("advantage", isNum(r.advantage) ? (r.advantage > 0 ? "+" : "") + r.advantage.toFixed(3) : "none (not trained on)");
    if (r.finish) add("finish", r.finish);
    const card = el("div", { class: "sample" + (Object.keys(r.errors).length ? " has-error" : "") }, meta);
    for (const [label, message] of Object.entries(r.errors)) card.append(el("div", { class: "error-tag", text: `reward error · ${label}: ${message}` }));
    const pictures = r.images.map((path) => RUNS[state.run].images?.[path]).filter(Boolean);
    if (pictures.length) card.append(el("div", { class: "sample-images" },
      ...pictures.map((src) => el("img", { src, alt: "prompt image", class: "sample-image" }))));
    card.append(el("details", {}, el("summary", { text: "prompt" }), el("pre", { text: r.prompt ?? "" })));
    if (r.reference !== undefined && r.reference !== null) card.append(el("div", { class: "muted" }, "reference: ", el("code", { text: String(r.reference) })));
    card.append(completionNode(r, scale));
    return card;
  }
  function options(select, values, current) {
    select.replaceChildren(...values.map(([value, label]) => el("option", { value, selected: value === current }, label)));
  }
  function buildBrowser() {
    const root = document.getElementById("browser");
    const runSel = el("select", { id: "f-run" }), srcSel = el("select", { id: "f-source" });
    const stepSel = el("select", { id: "f-step" }), groupSel = el("select", { id: "f-group" });
    const rmin = el("input", { id: "f-rmin", type: "number", step: "any", placeholder: "min" });
    const rmax = el("input", { id: "f-rmax", type: "number", step: "any", placeholder: "max" });
    const errors = el("input", { id: "f-errors", type: "checkbox" });
    const text = el("input", { id: "f-text", type: "search", placeholder: "text in prompt or completion" });
    const colour = el("select", { id: "f-colour" });
    options(colour, [["advantage", "advantage"], ["logprob", "sampling logprob"], ["none", "none"]], state.colour);
    options(runSel, RUNS.map((run, i) => [String(i), run.name]), "0");
    const controls = el("div", { class: "controls" },
      RUNS.length > 1 ? el("label", {}, "run", runSel) : null,
      el("label", {}, "samples", srcSel), el("label", {}, "step", stepSel), el("label", {}, "group", groupSel),
      el("label", {}, "reward", rmin, "to", rmax), el("label", {}, errors, "only with reward errors"),
      el("label", {}, text), el("label", {}, "colour tokens by", colour));
    const note = el("div", { class: "scale-note", id: "colour-note" });
    const pager = el("div", { class: "pager" });
    const list = el("div", { id: "samples" });
    root.append(controls, note, pager, list);

    function refreshChoices() {
      const run = RUNS[state.run];
      options(srcSel, [["train", `training rollouts (samples.jsonl, ${run.samples.length})`],
        ["eval", `held-out greedy (eval_samples.jsonl, ${run.evalSamples.length})`]], state.source);
      const all = rows();
      const steps = [...new Set(all.map((r) => r.step))].sort((a, b) => a - b);
      if (state.step !== "all" && !steps.map(String).includes(state.step)) state.step = "all";
      options(stepSel, [["all", `all (${steps.length})`], ...steps.map((s) => [String(s), String(s)])], state.step);
      const groups = [...new Set(all.map((r) => r.group).filter((g) => g !== undefined && g !== null))].map(String).sort();
      if (state.group !== "all" && !groups.includes(state.group)) state.group = "all";
      options(groupSel, [["all", "all"], ...groups.map((g) => [g, g])], state.group);
      groupSel.disabled = !groups.length;
    }
    function render() {
      const all = rows();
      const shown = filtered(all);
      const scale = advantageScale(all);
      const pages = Math.max(1, Math.ceil(shown.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      const hasTokens = all.some((r) => Array.isArray(r.tokens));
      note.textContent = !hasTokens ? "These rows hold no per-token data (samples written before log.tokens, or held-out evals): plain text."
        : state.colour === "advantage" ? `Green: positive advantage (made more likely), red: negative; full colour at |advantage| = ${scale.toFixed(3)}, the largest in this run's rows. Hover a token for its logprob and advantage.`
        : state.colour === "logprob" ? "Orange: tokens the sampling policy found unlikely (full colour at logprob ≤ −5). Grey italics: environment or tool tokens." : "";
      const start = state.page * PAGE;
      pager.replaceChildren(
        el("button", { id: "f-prev", disabled: state.page === 0, onclick: () => { state.page -= 1; render(); } }, "‹ prev"),
        el("span", { id: "f-count", text: shown.length ? `${start + 1}–${Math.min(start + PAGE, shown.length)} of ${shown.length} (of ${all.length})` : `none of ${all.length} match` }),
        el("button", { id: "f-next", disabled: state.page >= pages - 1, onclick: () => { state.page += 1; render(); } }, "next ›"));
      list.replaceChildren(...shown.slice(start, start + PAGE).map((r) => sampleCard(r, scale)));
    }
    const on = (node, key, event, read) => node.addEventListener(event, () => {
      state[key] = read(node);
      state.page = 0;
      if (key === "run" || key === "source") refreshChoices();
      render();
    });
    on(runSel, "run", "change", (n) => Number(n.value));
    on(srcSel, "source", "change", (n) => n.value);
    on(stepSel, "step", "change", (n) => n.value);
    on(groupSel, "group", "change", (n) => n.value);
    on(rmin, "rmin", "input", (n) => n.value);
    on(rmax, "rmax", "input", (n) => n.value);
    on(errors, "errors", "change", (n) => n.checked);
    on(text, "text", "input", (n) => n.value);
    on(colour, "colour", "change", (n) => n.value);
    if (!RUNS[0].samples.length && RUNS[0].evalSamples.length) state.source = "eval";
    refreshChoices();
    render();
  }

  // ------------------------------------------------------------------ start
  drawRunsLegend();
  drawCharts();
  document.getElementById("smoothing").addEventListener("change", drawCharts);
  buildBrowser();
  document.body.dataset.ready = "1";
})();
