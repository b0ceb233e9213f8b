// little-workflow UI: renders the runs list, a run's page and an outer loop's page from
// the JSON API, and follows a live run through its server-sent event stream.
//
// Run data is untrusted (prompts, tool results, outputs may hold anything, markup
// included). Every node is built by h() below, which sets text as text: nothing in this
// file parses a string as HTML.
"use strict";

(() => {
  const main = document.getElementById("main");
  const live = document.getElementById("live");

  // --- building DOM ------------------------------------------------------------------

  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "open") node.open = Boolean(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else if (child instanceof Node) node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
  }

  // --- formatting --------------------------------------------------------------------

  const pad = (n, width = 2) => String(n).padStart(width, "0");

  function when(ts) {
    if (!ts) return "-";
    const d = new Date(ts * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function clock(ts) {
    const d = new Date(ts * 1000);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.` +
      pad(d.getMilliseconds(), 3);
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "-";
    if (seconds < 1) return `${Math.max(0, Math.round(seconds * 1000))} ms`;
    if (seconds < 60) return `${seconds.toFixed(1)} s`;
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return `${minutes}m ${pad(Math.floor(seconds % 60))}s`;
    return `${Math.floor(minutes / 60)}h ${pad(minutes % 60)}m`;
  }

  function bytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
    return `${(n / 1024 / 1024).toFixed(1)} MB`;
  }

  const pretty = (value) => JSON.stringify(value, null, 2);

  function preview(value, limit = 96) {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    if (text === undefined) return "";
    const line = text.replace(/\s+/g, " ").trim();
    return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
  }

  const short = (text, n = 12) => (text && text.length > n ? `${text.slice(0, n)}…` : text || "-");

  // A duration that keeps counting while the page is open (see the ticker below).
  function elapsed(since, until) {
    if (until) return h("span", null, duration(until - since));
    return h("span", { class: "ticking", dataset: { since: String(since) } },
      duration(Date.now() / 1000 - since));
  }

  setInterval(() => {
    for (const node of document.querySelectorAll("[data-since]")) {
      node.textContent = duration(Date.now() / 1000 - Number(node.dataset.since));
    }
  }, 1000);

  const badge = (status) =>
    h("span", { class: `badge status-${status || "unknown"}` }, status || "unknown");

  const dot = (status) =>
    h("span", { class: `dot status-${status || "unknown"}`, title: status || "" });

  const runLink = (runId) => h("a", { class: "mono", href: `/runs/${encodeURIComponent(runId)}` }, runId);

  const jsonBlock = (value, extra) => h("pre", { class: `json ${extra || ""}` }, pretty(value));

  function section(title, ...body) {
    return h("section", { class: "card" },
      h("div", { class: "card-head" }, Array.isArray(title) ? title : h("h2", null, title)),
      h("div", { class: "card-body" }, body));
  }

  function message(text, kind = "muted") {
    return h("p", { class: kind }, text);
  }

  async function api(path) {
    const response = await fetch(path, { headers: { accept: "application/json" } });
    if (!response.ok) {
      let detail = response.statusText;
      try {
        detail = (await response.json()).message || detail;
      } catch (_) { /* not JSON: keep the status text */ }
      throw new Error(`${response.status}: ${detail}`);
    }
    return response.json();
  }

  function setLive(state, text) {
    live.hidden = !state;
    live.className = `live live-${state}`;
    live.textContent = text || "";
  }

  // --- runs list ---------------------------------------------------------------------

  const STATUSES = ["running", "waiting", "interrupted", "completed", "failed", "cancelled"];

  function runsPage() {
    document.title = "Runs · little-workflow";
    const params = new URLSearchParams(location.search);
    const filters = {
      status: params.get("status") || "",
      workflow: params.get("workflow") || "",
      subRuns: params.get("subRuns") === "1",
    };
    const body = h("tbody");
    const counter = h("span", { class: "muted" });
    const loopsBody = h("div");

    function changed() {
      const query = new URLSearchParams();
      if (filters.status) query.set("status", filters.status);
      if (filters.workflow) query.set("workflow", filters.workflow);
      if (filters.subRuns) query.set("subRuns", "1");
      const text = query.toString();
      history.replaceState(null, "", text ? `/?${text}` : "/");
      refresh();
    }

    const statusSelect = h("select", { "aria-label": "status", onchange: (e) => { filters.status = e.target.value; changed(); } },
      h("option", { value: "" }, "All statuses"),
      STATUSES.map((s) => h("option", { value: s, selected: filters.status === s }, s)));
    const workflowInput = h("input", {
      type: "search", placeholder: "Workflow name", value: filters.workflow, "aria-label": "workflow",
      onchange: (e) => { filters.workflow = e.target.value.trim(); changed(); },
    });
    const subRunsBox = h("label", { class: "check" },
      h("input", { type: "checkbox", checked: filters.subRuns, onchange: (e) => { filters.subRuns = e.target.checked; changed(); } }),
      "Include sub-runs");

    main.replaceChildren(
      h("div", { class: "page-head" }, h("div", null, h("h1", null, "Runs"), counter)),
      h("div", { class: "filters" }, statusSelect, workflowInput, subRunsBox),
      h("section", { class: "card" },
        h("table", { class: "table runs" },
          h("thead", null, h("tr", null,
            h("th", null, "Run"), h("th", null, "Workflow"), h("th", null, "Status"),
            h("th", { class: "num" }, "Steps done"), h("th", { class: "num" }, "Events"),
            h("th", { class: "num", title: "Model tokens this run paid for (input + output)" }, "Tokens"),
            h("th", null, "Started"), h("th", { class: "num" }, "Duration"))),
          body)),
      h("div", { class: "page-head", id: "loops" }, h("h2", null, "Outer loops")),
      loopsBody);

    async function refresh() {
      const query = new URLSearchParams({ limit: "100" });
      if (filters.status) query.set("status", filters.status);
      if (filters.workflow) query.set("workflow", filters.workflow);
      if (filters.subRuns) query.set("subRuns", "1");
      try {
        const [{ runs }, { loops }] = await Promise.all([api(`/api/runs?${query}`), api("/api/loops")]);
        counter.textContent = `${runs.length} run${runs.length === 1 ? "" : "s"}`;
        body.replaceChildren(...runs.map(runRow));
        if (!runs.length) {
          body.replaceChildren(h("tr", null, h("td", { colspan: 8, class: "empty" },
            "No runs yet. Start one with: little-workflow run WORKFLOW.yaml")));
        }
        loopsBody.replaceChildren(loopsTable(loops));
      } catch (error) {
        counter.textContent = String(error.message);
      }
    }

    refresh();
    setInterval(() => { if (!document.hidden) refresh(); }, 2000);
  }

  function runRow(run) {
    const running = run.status === "running";
    return h("tr", { class: running ? "is-running" : null, dataset: { runId: run.runId } },
      h("td", null, runLink(run.runId),
        run.parentRunId ? h("div", { class: "sub muted" }, "sub-run of ", runLink(run.parentRunId)) : null),
      h("td", null, run.workflow || "-"),
      h("td", null, badge(run.status)),
      h("td", { class: "num" }, run.stepsDone === null ? "?" : String(run.stepsDone)),
      h("td", { class: "num" }, String(run.events)),
      h("td", { class: "num tokens" }, run.usage ? String(run.usage.paid.totalTokens) : "?"),
      h("td", { class: "nowrap" }, when(run.createdAt)),
      h("td", { class: "num nowrap" }, running ? elapsed(run.createdAt) : duration(run.updatedAt - run.createdAt)));
  }

  function loopsTable(loops) {
    if (!loops.length) return h("section", { class: "card" }, h("div", { class: "card-body" }, message("No outer loops in this data directory.")));
    return h("section", { class: "card" }, h("table", { class: "table" },
      h("thead", null, h("tr", null, h("th", null, "Outer loop"), h("th", { class: "num" }, "Cycles"),
        h("th", null, "State"), h("th", null, "Updated"))),
      h("tbody", null, loops.map((loop) => h("tr", null,
        h("td", null, h("a", { class: "mono", href: `/loops/${encodeURIComponent(loop.outerLoopId)}` }, loop.outerLoopId)),
        h("td", { class: "num" }, loop.error ? "-" : `${loop.cycles} / ${loop.maxCycles}`),
        h("td", null, loop.error ? h("span", { class: "error-text" }, loop.error)
          : badge(loop.result ? loop.result : "running")),
        h("td", { class: "nowrap" }, when(loop.updatedAt)))))));
  }

  // --- one run -----------------------------------------------------------------------

  function runPage(runId) {
    document.title = `${runId} · little-workflow`;
    const page = {
      open: new Set(),        // keys of expanded <details>, kept across re-renders
      rendered: new Map(),    // section name -> the JSON it was last rendered from
      eventCount: 0,
      loaded: false,
    };
    const slots = {
      head: h("div", { class: "run-head" }),
      failure: h("div"),
      steps: h("div", { class: "tree", id: "steps" }),
      stepsCount: h("span", { class: "muted" }),
      events: h("ol", { class: "timeline", id: "events" }),
      eventsCount: h("span", { class: "muted" }),
      calls: h("div", { id: "calls" }),
      usage: h("div", { id: "usage" }),
      children: h("div"),
      loop: h("div"),
      artifacts: h("div", { id: "artifacts" }),
      io: h("div", { class: "io" }),
      streaming: h("div", { id: "streaming" }),
    };
    const timeline = h("div", { class: "timeline-scroll" }, slots.events);
    const answers = liveAnswers(runId, page, slots);
    const steps = stepPages(runId, page, slots, () => answers.place());
    main.replaceChildren(
      slots.head, slots.failure,
      h("div", { class: "columns" },
        section([h("h2", null, "Steps"), slots.stepsCount], slots.streaming, slots.steps),
        section([h("h2", null, "Events"), slots.eventsCount], timeline)),
      slots.usage, slots.calls, slots.children, slots.loop, slots.artifacts, slots.io);
    slots.head.append(message("Loading run..."));

    const once = (name, value, draw) => {
      const text = JSON.stringify(value);
      if (page.rendered.get(name) === text) return;
      page.rendered.set(name, text);
      draw();
    };

    function render(payload) {
      const run = payload.run;
      page.payload = payload;
      once("head", [run, Math.floor(Date.now() / 60000)], () => slots.head.replaceChildren(...runHead(run)));
      once("failure", [run.failure, run.interruption, run.waiting], () => slots.failure.replaceChildren(
        run.failure ? failureBox(run) : run.waiting ? waitingBox(run) : run.interruption ? interruptedBox(run) : ""));
      once("steps", [payload.tree, payload.treeNext, payload.stepCounts, run.status], () => {
        slots.stepsCount.textContent = stepCountsText(payload.stepCounts, run);
        steps.first(payload.tree, payload.treeNext);
      });
      answers.place();
      once("usage", payload.usage, () => slots.usage.replaceChildren(
        payload.usage.totalPaid.calls || payload.usage.interrupted || payload.usage.open
          ? section("Model usage", usageView(payload.usage)) : ""));
      page.callUsage = new Map(payload.usage.calls.map((c) => [`${c.sessionId}:${c.callId}`, c]));
      once("calls", [payload.sessions, payload.usage.calls], () => slots.calls.replaceChildren(
        payload.sessions.length ? section("Model and tool calls", payload.sessions.map((s) => sessionCard(s, page))) : ""));
      once("children", payload.subRuns, () => slots.children.replaceChildren(
        payload.subRuns.length ? section("Sub-runs", subRunsTable(payload.subRuns)) : ""));
      once("loop", payload.outerLoop, () => slots.loop.replaceChildren(
        payload.outerLoop ? section(`Outer loop ${payload.outerLoop.outerLoopId}`, cyclesView(payload.outerLoop, runId)) : ""));
      once("artifacts", payload.artifacts, () => slots.artifacts.replaceChildren(
        section("Artifacts", artifactsView(payload.artifacts, runId))));
      once("io", [run.input, run.output, run.status], () => slots.io.replaceChildren(
        section("Input", jsonBlock(run.input)),
        section("Output", run.status === "completed" ? jsonBlock(run.output) : message(run.status === "running" || run.status === "interrupted" ? "Not finished yet." : "No output."))));
    }

    function addEvents(events) {
      const stick = timeline.scrollTop + timeline.clientHeight >= timeline.scrollHeight - 24;
      for (const record of events) slots.events.append(eventItem(record, page, page.loaded));
      page.eventCount += events.length;
      slots.eventsCount.textContent = `${page.eventCount} event${page.eventCount === 1 ? "" : "s"}`;
      if (stick || !page.loaded) timeline.scrollTop = timeline.scrollHeight;
    }

    const stream = new EventSource(`/api/runs/${encodeURIComponent(runId)}/stream?after=0`);
    stream.addEventListener("delta", (e) => {
      for (const batch of JSON.parse(e.data).batches) answers.feed(batch);
    });
    stream.addEventListener("update", (e) => {
      const update = JSON.parse(e.data);
      answers.logged(update.events);
      addEvents(update.events);
      if (update.run) {
        render(update.run);
        page.loaded = true;
        setLive(...liveState(update.run.run.status));
      }
    });
    stream.addEventListener("end", (e) => {
      stream.close();
      answers.clear();
      setLive(...liveState(JSON.parse(e.data).status));
    });
    stream.addEventListener("error", () => {
      if (stream.readyState === EventSource.CLOSED || !page.loaded) {
        stream.close();
        api(`/api/runs/${encodeURIComponent(runId)}`).catch((error) => {
          slots.head.replaceChildren(breadcrumbs(runId, null), h("div", { class: "callout error" }, String(error.message)));
        });
      }
      if (stream.readyState === EventSource.CONNECTING) setLive("wait", "Reconnecting…");
    });
  }

  // --- the step tree, a page at a time ---------------------------------------------

  // A run's view holds the first page of its step tree; the next ones come from
  // /api/runs/{id}/steps?after=<the last path shown>, when the "more" row at the end of
  // the tree scrolls into view (or is clicked). A live update redraws the first page
  // and reads again the pages loaded after it, so what was shown stays shown.
  function stepPages(runId, page, slots, placed) {
    const base = `/api/runs/${encodeURIComponent(runId)}/steps`;
    let head = [];           // the first page, as the latest view had it
    let extra = [];          // the nodes of the pages loaded after it
    let next = null;         // where the page after the last one loaded starts
    let generation = 0;      // a redraw started later wins over a read still going
    let loading = false;
    page.tree = [];
    const more = h("button", { type: "button", class: "more", id: "steps-more" }, "Show more steps");
    more.addEventListener("click", () => loadMore());
    const observer = typeof IntersectionObserver === "function"
      ? new IntersectionObserver((entries) => {
        if (entries.some((e) => e.isIntersecting)) loadMore();
      })
      : null;
    if (observer) observer.observe(more);

    function draw() {
      page.tree = head.concat(extra);
      const run = page.payload.run;
      if (!page.tree.length) {
        slots.steps.replaceChildren(message("No step has started yet."));
      } else {
        slots.steps.replaceChildren(...stepTree(page.tree, page, run));
      }
      if (next !== null) {
        const shown = page.tree.filter((n) => n.step).length;
        more.textContent = `Show more steps (${shown} of ${countAll(page.payload.stepCounts)} shown)`;
        more.disabled = loading;
        slots.steps.append(more);
      }
      placed();
    }

    async function read(after, limit) {
      const query = new URLSearchParams({ after, limit: String(limit) });
      return api(`${base}?${query}`);
    }

    async function redraw(tree, treeNext) {
      const mine = (generation += 1);
      head = tree;
      const wanted = extra.length;
      if (!wanted || treeNext === null) {
        extra = [];
        next = treeNext;
        draw();
        return;
      }
      // Pages were loaded after the first one: read as many nodes again, then draw.
      const nodes = [];
      let after = treeNext;
      while (after !== null && nodes.length < wanted) {
        const found = await read(after, Math.min(5000, wanted - nodes.length));
        if (mine !== generation) return;
        nodes.push(...found.tree);
        after = found.next;
      }
      extra = nodes;
      next = after;
      draw();
    }

    async function loadMore() {
      if (loading || next === null) return;
      loading = true;
      more.disabled = true;
      const mine = generation;
      try {
        const found = await read(next, 500);
        if (mine !== generation) return;
        extra = extra.concat(found.tree);
        next = found.next;
      } finally {
        loading = false;
        if (mine === generation) draw();
      }
    }

    return {
      first(tree, treeNext) {
        redraw(tree, treeNext).catch((error) => slots.steps.append(
          h("div", { class: "callout error" }, String(error.message))));
      },
    };
  }

  const countAll = (counts) => Object.values(counts).reduce((a, b) => a + b, 0);

  function stepCountsText(counts, run) {
    // An unfinished step of an interrupted run is interrupted, as its row says.
    const running = counts.running || 0;
    const stopped = run.status === "interrupted";
    return [
      `${counts.completed || 0} done`,
      running && !stopped ? `${running} running` : "",
      running && stopped ? `${running} interrupted` : "",
      counts.failed ? `${counts.failed} failed` : "",
    ].filter(Boolean).join(" · ");
  }

  // --- model answers streaming in ---------------------------------------------------

  // The answers of the model calls that stream now (the stream's "delta" messages, sent
  // from the process driving the run, never journaled), each under the step it belongs
  // to: text as it comes, reasoning dimmed, a tool call by its name; started over when
  // the call is made again. The committed answer replaces it: its event, in this run's
  // log, removes the box (a sub-run's, not in this log, goes when its step ends, or
  // when the same sub-run streams its next call).
  function liveAnswers(runId, page, slots) {
    const calls = new Map();     // `${runId} ${path}` -> the call's live box
    const committed = new Set(); // calls whose answer is in the log: late deltas ignored
    const keyOf = (run, path) => `${run} ${path}`;

    function anchorPath(call) {
      const payload = page.payload;
      if (!payload) return null;
      if (call.runId === runId) {
        const session = payload.sessions.find((s) => s.calls.some((c) => c.callId === call.path));
        return session ? session.stepPath : null;
      }
      // A sub-run's call (or a sub-run's sub-run's): under the step that started the
      // sub-run of this run it descends from.
      const child = call.lineage[call.lineage.indexOf(runId) + 1];
      const node = page.tree.find((n) => n.step && n.step.subRunId === child);
      return node ? node.path : null;
    }

    function place() {
      for (const call of calls.values()) {
        call.anchor = anchorPath(call);
        const row = call.anchor === null ? null
          : slots.steps.querySelector(`details[data-key="${CSS.escape(`step:${call.anchor}`)}"]`);
        if (row) {
          if (row.nextSibling !== call.box) row.after(call.box);
        } else if (call.box.parentNode !== slots.streaming) {
          slots.streaming.append(call.box);
        }
      }
    }

    function drop(key) {
      const call = calls.get(key);
      if (call) call.box.remove();
      calls.delete(key);
    }

    function start(batch) {
      const label = batch.runId === runId ? batch.path : `${batch.runId}/${batch.path}`;
      const body = h("div", { class: "live-body" });
      const box = h("div", { class: "live-answer", dataset: { run: batch.runId, call: batch.path } },
        h("div", { class: "live-head" }, h("span", { class: "live-pen" }, "✎ "),
          h("span", { class: "mono" }, label), h("span", { class: "muted small" }, ` · ${batch.slot} · streaming…`)),
        body);
      return { runId: batch.runId, lineage: batch.lineage, path: batch.path, attempt: batch.attempt,
        next: batch.seq, box, body, last: null, anchor: null };
    }

    function feed(batch) {
      const key = keyOf(batch.runId, batch.path);
      if (committed.has(key)) return;
      let call = calls.get(key);
      if (!call) {
        // A sub-run streams its next call: the one before has most likely ended.
        for (const [other, was] of calls) if (was.runId === batch.runId && batch.runId !== runId) drop(other);
        call = start(batch);
        calls.set(key, call);
        place();
      } else if (call.attempt !== batch.attempt) {
        call.attempt = batch.attempt;
        call.body.replaceChildren(h("div", { class: "live-note" }, "(stream cut: asked again)"));
        call.last = null;
      } else if (batch.seq !== call.next) {
        call.body.append(h("span", { class: "live-note", title: "the page fell behind: some of the answer was not shown" }, " … "));
        call.last = null;
      }
      call.next = batch.seq + 1;
      for (const delta of batch.deltas) {
        if (delta.kind === "tool_call") {
          call.last = null;
          if (delta.name) call.body.append(h("div", { class: "live-tool" }, `calls ${delta.name}`));
          continue;
        }
        if (!call.last || call.last.kind !== delta.kind) {
          const span = h("span", { class: `live-${delta.kind}` });
          call.body.append(span);
          call.last = { kind: delta.kind, node: span };
        }
        call.last.node.append(document.createTextNode(delta.text));
      }
      call.body.scrollTop = call.body.scrollHeight;
    }

    function logged(events) {
      for (const record of events) {
        const e = record.event;
        if (record.type === "harness.model.responded") {
          committed.add(keyOf(runId, e.callId));
          drop(keyOf(runId, e.callId));
        } else if (record.type === "StepCompleted" || record.type === "StepFailed") {
          for (const [key, call] of calls) if (call.runId !== runId && call.anchor === e.stepPath) drop(key);
        }
      }
    }

    function clear() {
      for (const key of [...calls.keys()]) drop(key);
    }

    return { feed, logged, place, clear };
  }

  // The header's badge: a run is live only while something drives it.
  function liveState(status) {
    if (status === "running") return ["on", "Live"];
    if (status === "interrupted") return ["cut", "Interrupted"];
    if (status === "waiting") return ["wait", "Waiting"];
    return ["off", "Finished"];
  }

  function breadcrumbs(runId, parentRunId) {
    return h("nav", { class: "crumbs" }, h("a", { href: "/" }, "Runs"),
      parentRunId ? [h("span", { class: "sep" }, "/"), runLink(parentRunId)] : null,
      h("span", { class: "sep" }, "/"), h("span", { class: "mono" }, runId));
  }

  function runHead(run) {
    const stat = (label, value, cls) => h("div", { class: "stat" },
      h("div", { class: "stat-label" }, label), h("div", { class: `stat-value ${cls || ""}` }, value));
    const running = run.status === "running";
    return [
      breadcrumbs(run.runId, run.parentRunId),
      h("div", { class: "title-row" },
        h("h1", { class: "mono" }, run.runId), h("span", { id: "run-status" }, badge(run.status))),
      h("div", { class: "subtitle" },
        h("strong", null, run.workflow || "-"),
        run.parentStepPath ? [" · started by step ", h("span", { class: "mono" }, run.parentStepPath)] : null,
        run.outerLoopId ? [" · cycle ", String(run.cycleNumber), " of outer loop ",
          h("a", { class: "mono", href: `/loops/${encodeURIComponent(run.outerLoopId)}` }, run.outerLoopId)] : null),
      h("div", { class: "stats" },
        stat("Started", when(run.createdAt)),
        stat("Duration", running ? elapsed(run.createdAt) : duration(run.updatedAt - run.createdAt)),
        stat("Steps done", run.stepsDone === null ? "?" : String(run.stepsDone), "num"),
        stat("Events", String(run.events), "num"),
        stat("Resumes", String(run.resumes), "num"),
        stat("Definition", h("span", { class: "mono", title: run.definitionHash }, short(run.definitionHash, 19))),
        stat("Version", h("span", { class: "mono" }, run.workflowVersionId || "-"))),
    ];
  }

  function failureBox(run) {
    const failure = run.failure;
    return h("div", { class: `callout ${run.status === "cancelled" ? "warn" : "error"}` },
      h("strong", null, run.status === "cancelled" ? "Cancelled" : `Failed: ${failure.cause}`),
      failure.stepPath ? [" at ", h("span", { class: "mono" }, failure.stepPath)] : null,
      failure.message ? h("div", { class: "callout-text" }, failure.message) : null);
  }

  // A run parked at a wait: what it waits for, since when, and how to answer it (the
  // form, or the command).
  function waitingBox(run) {
    const w = run.waiting;
    const target = w.runId || run.runId;
    const asking = w.kind === "ask_user";
    return h("div", { class: "callout warn", id: "waiting" },
      h("strong", null, "Waiting"),
      asking ? [" for an answer to the agent's question, event ", h("span", { class: "mono" }, w.event)]
        : w.event ? [" for event ", h("span", { class: "mono" }, w.event)] : " for a timer",
      " at step ", h("span", { class: "mono" }, w.path), ` since ${when(w.since)}`,
      w.wakeAt ? (w.event ? `; times out ${when(w.wakeAt)}` : `; due ${when(w.wakeAt)}`) : "",
      w.event && w.ready ? h("div", { class: "callout-text", id: "answered" },
        "The event arrived. A worker (little-workflow worker) continues the run, or by hand: ",
        h("span", { class: "mono" }, `little-workflow resume ${target}`)) : null,
      w.event && !w.ready ? [
        answerForm(target, w),
        h("div", { class: "callout-text" }, "Or from a shell: ",
          h("span", { class: "mono" }, `little-workflow send ${target} ${w.event} --data ${asking ? "'\"ANSWER\"'" : "JSON"}`)),
      ] : null);
  }

  // One idempotency key per form shown: submitting it twice delivers the event once.
  function formKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return `ui-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
  }

  // The form that answers a wait. It is sent by script (the page's policy allows no form
  // action), as JSON, to the one write endpoint; the server checks the wait's schema.
  function answerForm(target, w) {
    const key = formKey();
    const asking = w.kind === "ask_user";
    const event = h("input", { class: "mono", name: "event", id: "answer-event", value: w.event, required: true });
    const data = h("textarea", asking
      ? { name: "answer", id: "answer-data", rows: 3, placeholder: "Your answer" }
      : { name: "data", id: "answer-data", rows: 4, class: "mono", placeholder: "The payload, as JSON (empty: null)" });
    const result = h("div", { class: "answer-result", id: "answer-result", role: "status" });
    const button = h("button", { type: "submit", id: "answer-send" }, asking ? "Send the answer" : "Send the event");
    const form = h("form", { class: "answer", id: "answer-form" },
      asking ? h("div", { class: "question", id: "answer-question" }, h("strong", null, "The agent asks: "),
        typeof w.question === "string" ? w.question : JSON.stringify(w.question)) : null,
      h("label", null, h("span", null, "Event"), event),
      h("label", null, h("span", null, asking ? "Answer" : "Payload (JSON)"), data),
      !asking && w.schema ? h("details", { class: "schema", open: true }, h("summary", null, "The payload's schema"), jsonBlock(w.schema)) : null,
      h("div", { class: "answer-actions" }, button, result));
    const say = (kind, text) => { result.className = `answer-result ${kind}`; result.textContent = text; };
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      let payload = data.value;
      if (!asking) {
        try {
          payload = data.value.trim() === "" ? null : JSON.parse(data.value);
        } catch (error) {
          say("error", `The payload is not JSON: ${error.message}`);
          return;
        }
      }
      button.disabled = true;
      try {
        const response = await fetch(`/api/runs/${encodeURIComponent(target)}/send`, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json" },
          body: JSON.stringify({ event: event.value, data: payload, key }),
        });
        const body = await response.json().catch(() => ({}));
        if (!response.ok) {
          say("error", `${body.error || response.status}: ${body.message || response.statusText}`);
          return;
        }
        say("ok", {
          delivered: "Sent: recorded in the run's log.",
          kept: "Sent: the run takes it when it reaches the wait.",
          duplicate: "Already sent: delivered once.",
        }[body.outcome] || `Sent (${body.outcome}).`);
      } catch (error) {
        say("error", String(error.message || error));
      } finally {
        button.disabled = false;
      }
    });
    return form;
  }

  function interruptedBox(run) {
    return h("div", { class: "callout warn", id: "interrupted" },
      h("strong", null, "Interrupted"), ": nobody is driving this run (", run.interruption,
      "). Nothing happens until it is resumed: ",
      h("span", { class: "mono" }, `little-workflow resume ${run.runId}`),
      h("div", { class: "callout-text" }, `Its last event was at ${when(run.updatedAt)}.`));
  }

  // A step that was running when its run's process died is shown interrupted, not running.
  const stepStatus = (step, run) =>
    step.status === "running" && run.status === "interrupted" ? "interrupted" : step.status;

  // A branch or visit group has no step of its own: it shows the worst state below it,
  // which the server works out (the steps below may be on pages not loaded yet).
  const groupStatus = (node, run) => stepStatus({ status: node.status }, run);

  function details(key, page, summary, body, extra) {
    const node = h("details", { class: extra || "", open: page.open.has(key), dataset: { key } },
      h("summary", null, summary), body);
    node.addEventListener("toggle", () => {
      if (node.open) page.open.add(key);
      else page.open.delete(key);
    });
    return node;
  }

  function stepTree(tree, page, run) {
    // In a run that is not going on, an unfinished step's time ends with the run's last event.
    const until = (step) => step.endedAt || (run.status === "running" ? null : run.updatedAt);
    return tree.map((node) => {
      const step = node.step;
      const guides = h("span", { class: "guides", dataset: { depth: String(node.depth) } });
      guides.style.width = `${node.depth * 18}px`;
      if (!step) {
        const status = groupStatus(node, run);
        return h("div", { class: "tree-row group", dataset: { path: node.path, status } }, guides,
          dot(status), h("span", { class: "step-label mono" }, node.label),
          h("span", { class: "kind" }, node.label.startsWith("[") ? "branch" : "visits"));
      }
      const status = stepStatus(step, run);
      const row = h("div", { class: "tree-row", dataset: { path: node.path, status } }, guides,
        dot(status), h("span", { class: "step-label mono" }, node.label),
        h("span", { class: "kind" }, step.kind),
        step.route ? h("span", { class: "route" }, "→ ", step.route) : null,
        step.attempts > 1 ? h("span", { class: "attempts", title: "attempts" }, `×${step.attempts}`) : null,
        h("span", { class: "spacer" }),
        h("span", { class: "took" }, step.startedAt ? elapsed(step.startedAt, until(step)) : ""));
      const body = h("div", { class: "step-detail" },
        h("dl", { class: "facts" },
          h("dt", null, "Path"), h("dd", { class: "mono" }, step.path),
          h("dt", null, "Status"), h("dd", null, badge(status)),
          h("dt", null, "Attempts"), h("dd", null, String(step.attempts), step.failures ? ` (${step.failures} failed)` : ""),
          h("dt", null, "Started"), h("dd", null, step.startedAt ? clock(step.startedAt) : "-"),
          step.subRunId ? [h("dt", null, "Sub-run"), h("dd", null, runLink(step.subRunId))] : null,
          step.error ? [h("dt", null, "Error"), h("dd", { class: "error-text" }, step.error)] : null),
        step.status === "completed" ? [h("div", { class: "label" }, "Output"), jsonBlock(step.output)] : null);
      return details(`step:${node.path}`, page, row, body, "tree-item");
    });
  }

  function category(type) {
    if (type.startsWith("Run")) return "run";
    if (type.startsWith("harness.model")) return "model";
    if (type.startsWith("harness.tool")) return "tool";
    if (type.startsWith("harness.")) return "harness";
    if (type.includes("Failed")) return "failed";
    return "step";
  }

  function describe(event) {
    const e = event.event;
    switch (event.type) {
      case "RunStarted": return `${e.workflowName}`;
      case "RunFailed": return `${e.causeCode}: ${e.message}`;
      case "RunResumed": return e.reason;
      case "StepAttemptStarted": return `${e.stepPath} · ${e.kind}${e.attempt > 1 ? ` · attempt ${e.attempt}` : ""}`;
      case "StepCompleted": return `${e.stepPath}${e.route ? ` → ${e.route}` : ""}`;
      case "StepAttemptFailed": return `${e.stepPath} · ${e.errorCode}${e.willRetry ? " (will retry)" : ""}`;
      case "StepFailed": return `${e.stepPath} · ${e.causeCode}`;
      case "SubRunStarted": return `${e.stepPath} → ${e.subRunId}`;
      case "SideEffectIntended": return `${e.stepPath} · key ${e.key} · attempt ${e.attempt}`;
      case "SideEffectReconciled": return `${e.stepPath} · key ${e.key} · ${e.happened ? "happened" : "did not happen"}`;
      case "harness.model.called": return `${e.slot}${e.request && e.request.model ? ` · ${e.request.model}` : ""}`;
      case "harness.tool_call.started": return `${e.toolName} ${preview(e.arguments, 60)}`;
      case "harness.tool_call.failed": return `${e.errorCode}: ${e.message}`;
      case "harness.session.started": return `${e.role}${e.stepPath ? ` · ${e.stepPath}` : ""}`;
      case "harness.execute_step.succeeded": return e.stepPath;
      case "OuterLoopCycleCompleted": return `cycle ${e.cycleNumber} · ${e.result.kind}`;
      case "code.pinned": return Object.entries(e.functions).map(([name, hash]) => `${name} ${hash}`).join(" · ");
      case "code.drifted": return e.changes.map((c) => `${c.kind} ${c.name}: ${c.old} → ${c.new}`).join(" · ");
      default: return e.stepPath || e.sessionId || "";
    }
  }

  function eventItem(record, page, fresh) {
    const summary = h("span", { class: "event-line" },
      h("span", { class: "seq mono" }, String(record.seq)),
      h("span", { class: "at mono" }, clock(record.ts)),
      h("span", { class: `etype cat-${category(record.type)}` }, record.type),
      h("span", { class: "edesc" }, describe(record)));
    const item = h("li", { class: fresh ? "fresh" : null, dataset: { seq: String(record.seq), type: record.type } },
      details(`event:${record.seq}`, page, summary, jsonBlock(record.event)));
    return item;
  }

  // --- model and tool calls ----------------------------------------------------------

  function sessionCard(session, page) {
    const done = session.calls.filter((c) => c.done).length;
    return h("div", { class: "session", dataset: { session: session.sessionId } },
      h("div", { class: "session-head" },
        h("span", { class: "role" }, session.role),
        session.stepPath ? h("span", { class: "mono" }, session.stepPath) : null,
        session.sessionId !== session.stepPath ? h("span", { class: "muted mono small" }, session.sessionId) : null,
        h("span", { class: "spacer" }),
        h("span", { class: "muted small" }, `${done}/${session.calls.length} calls`),
        badge(session.completed ? "completed" : "running")),
      session.calls.map((call) => callItem(session, call, page)));
  }

  function callState(call) {
    if (!call.done) return h("span", { class: "call-state pending" }, "pending");
    return call.ok ? h("span", { class: "call-state ok" }, "ok") : h("span", { class: "call-state err" }, "error");
  }

  function callItem(session, call, page) {
    const key = `call:${session.sessionId}:${call.callId}`;
    if (call.kind === "model") {
      const request = call.request || {};
      const response = call.value || {};
      const answer = response.message || {};
      const asked = (answer.toolCalls || []).map((t) => t.name);
      const gist = !call.done ? "waiting for the model…"
        : !call.ok ? `${call.errorCode}: ${call.message}`
          : asked.length ? `→ ${asked.join(", ")}` : preview(partsText(answer.content, "text"), 110);
      const used = page.callUsage && page.callUsage.get(`${session.sessionId}:${call.callId}`);
      const summary = h("span", { class: "call-line" },
        h("span", { class: "tag tag-model" }, "model"),
        h("span", { class: "call-name mono" }, call.slot, request.model ? ` · ${request.model}` : ""),
        h("span", { class: "call-gist" }, gist),
        used && used.usage ? h("span", { class: "call-tokens muted small num", dataset: { tokens: String(used.usage.totalTokens) } },
          `${used.usage.inputTokens} in / ${used.usage.outputTokens} out`,
          used.latency !== null ? ` · ${(used.latency * 1000).toFixed(0)} ms` : "",
          used.respondedIn !== used.calledIn ? " · cut off once" : "") : null,
        callState(call));
      const body = h("div", { class: "call-body" },
        h("div", { class: "label" }, `Request · ${(request.messages || []).length} messages`,
          request.tools && request.tools.length ? ` · tools: ${request.tools.map((t) => t.name).join(", ")}` : ""),
        h("div", { class: "messages" }, (request.messages || []).map(messageView)),
        call.done && call.ok ? [
          h("div", { class: "label" }, "Response",
            response.finishReason ? ` · ${response.finishReason}` : "",
            response.usage && (response.usage.inputTokens || response.usage.outputTokens)
              ? ` · ${response.usage.inputTokens} in / ${response.usage.outputTokens} out tokens` : ""),
          h("div", { class: "messages" }, messageView(answer.role ? answer : { role: "assistant", content: preview(response, 10000) })),
        ] : null,
        call.done && !call.ok ? h("div", { class: "callout error" }, `${call.errorCode}: ${call.message}`) : null);
      return details(key, page, summary, body, "call");
    }
    const summary = h("span", { class: "call-line" },
      h("span", { class: "tag tag-tool" }, "tool"),
      h("span", { class: "call-name mono" }, call.name),
      h("span", { class: "call-gist mono" }, preview(call.arguments, 60),
        call.done ? [h("span", { class: "arrow" }, "  →  "), call.ok ? preview(call.value, 60) : `${call.errorCode}: ${call.message}`] : ""),
      callState(call));
    const body = h("div", { class: "call-body two" },
      h("div", null, h("div", { class: "label" }, "Arguments"), jsonBlock(call.arguments)),
      h("div", null, h("div", { class: "label" }, call.done && !call.ok ? "Error" : "Result"),
        !call.done ? message("Not finished.")
          : call.ok ? jsonBlock(call.value) : h("pre", { class: "json error-text" }, `${call.errorCode}: ${call.message}`)));
    return details(key, page, summary, body, "call");
  }

  // A message's content is a string, or a list of parts (text, reasoning, media): the
  // text of the parts of one type, joined.
  function partsText(content, type) {
    if (!Array.isArray(content)) return type === "text" ? content || "" : "";
    return content.filter((part) => part && part.type === type && typeof part.text === "string")
      .map((part) => part.text).join("");
  }

  function messageView(msg) {
    const thought = partsText(msg.content, "reasoning");
    const text = partsText(msg.content, "text");
    return h("div", { class: `msg msg-${msg.role}` },
      h("div", { class: "msg-role" }, msg.role, msg.name ? h("span", { class: "muted" }, ` ${msg.name}`) : null),
      h("div", { class: "msg-body" },
        thought ? h("div", { class: "msg-text live-reasoning" }, thought) : null,
        text ? h("div", { class: `msg-text ${msg.isError ? "error-text" : ""}` }, text) : null,
        (msg.toolCalls || []).map((t) => h("div", { class: "msg-call mono" },
          h("span", { class: "tag tag-tool" }, "call"), ` ${t.name}(${JSON.stringify(t.arguments)})`,
          h("span", { class: "muted" }, `  ${t.id}`))),
        msg.toolCallId ? h("div", { class: "muted small mono" }, `for ${msg.toolCallId}`) : null));
  }

  // --- model usage -------------------------------------------------------------------

  function tokensText(t) {
    const extra = [t.cachedInputTokens ? `${t.cachedInputTokens} cached` : "", t.cacheWriteTokens ? `${t.cacheWriteTokens} cache write` : ""].filter(Boolean);
    return `${t.inputTokens} in${extra.length ? ` (${extra.join(", ")})` : ""} / ${t.outputTokens} out` +
      (t.reasoningTokens ? ` (${t.reasoningTokens} reasoning)` : "");
  }

  function costText(t) {
    if (t.cost === null) return t.unpricedCalls < t.calls ? `unknown (${t.unpricedCalls} unpriced)` : "unknown";
    return t.cost.toFixed(6).replace(/\.?0+$/, "");
  }

  function usageTable(label, rows) {
    return h("table", { class: "table usage-table" },
      h("thead", null, h("tr", null, h("th", null, label), h("th", { class: "num" }, "Calls"),
        h("th", { class: "num" }, "Tokens"), h("th", null, "Detail"), h("th", { class: "num" }, "Cost"))),
      h("tbody", null, rows.map(([name, t]) => h("tr", { dataset: { name } },
        h("td", { class: "mono" }, name), h("td", { class: "num" }, String(t.calls)),
        h("td", { class: "num", dataset: { tokens: String(t.totalTokens) } }, String(t.totalTokens)),
        h("td", { class: "muted small" }, tokensText(t)), h("td", { class: "num" }, costText(t))))));
  }

  function usageView(usage) {
    const rows = [["paid", usage.paid], ["replayed (not paid again)", usage.replayed]];
    if (usage.copied.calls) rows.push(["copied by the fork", usage.copied]);
    if (usage.subRuns.length) rows.push(["paid, with sub-runs", usage.totalPaid], ["replayed, with sub-runs", usage.totalReplayed]);
    const notes = [];
    if (usage.interrupted) notes.push(`${usage.interrupted} call${usage.interrupted === 1 ? "" : "s"} cut off mid-call (maybe paid; the log has no usage for them)`);
    if (usage.open) notes.push(`${usage.open} call${usage.open === 1 ? "" : "s"} waiting for an answer`);
    return h("div", { class: "usage" },
      usageTable("Run", rows),
      notes.length ? h("p", { class: "muted small" }, notes.join(" · ")) : null,
      Object.keys(usage.bySlot).length ? usageTable("Slot", Object.entries(usage.bySlot)) : null,
      Object.keys(usage.byStep).length ? usageTable("Step", Object.entries(usage.byStep)) : null,
      usage.passes.length > 1 ? usageTable("Pass", usage.passes.map((p) => [`${p.number} ${p.reason}`, p.paid])) : null);
  }

  // --- sub-runs, loops, artifacts ----------------------------------------------------

  function subRunsTable(runs) {
    return h("table", { class: "table" },
      h("thead", null, h("tr", null, h("th", null, "Run"), h("th", null, "Workflow"), h("th", null, "Status"),
        h("th", { class: "num" }, "Steps done"), h("th", { class: "num" }, "Events"), h("th", { class: "num" }, "Duration"))),
      h("tbody", null, runs.map((run) => h("tr", null,
        h("td", null, runLink(run.runId)), h("td", null, run.workflow || "-"), h("td", null, badge(run.status)),
        h("td", { class: "num" }, run.stepsDone === null ? "?" : String(run.stepsDone)),
        h("td", { class: "num" }, String(run.events)),
        h("td", { class: "num" }, run.status === "running" ? elapsed(run.createdAt) : duration(run.updatedAt - run.createdAt))))));
  }

  function cyclesView(loop, currentRunId) {
    const rows = loop.cycles.map((cycle) => h("tr", { class: cycle.runId === currentRunId ? "current" : null },
      h("td", { class: "num" }, String(cycle.cycleNumber)),
      h("td", null, runLink(cycle.runId)),
      h("td", null, badge(cycle.status)),
      h("td", null, cycle.summary || "-"),
      h("td", { class: "mono small" }, preview(cycle.output, 80))));
    if (loop.pendingCycleRunId) {
      const info = loop.runs[loop.pendingCycleRunId];
      rows.push(h("tr", { class: loop.pendingCycleRunId === currentRunId ? "current" : null },
        h("td", { class: "num" }, String(loop.cycles.length + 1)),
        h("td", null, runLink(loop.pendingCycleRunId)),
        h("td", null, badge(info ? info.status : "running")),
        h("td", { class: "muted" }, "in progress"), h("td", null, "")));
    }
    return [
      h("div", { class: "stats" },
        h("div", { class: "stat" }, h("div", { class: "stat-label" }, "Cycles"), h("div", { class: "stat-value" }, `${loop.cycles.length} / ${loop.maxCycles}`)),
        h("div", { class: "stat" }, h("div", { class: "stat-label" }, "Result"), h("div", { class: "stat-value" }, loop.result ? badge(loop.result.kind) : badge("running"))),
        h("div", { class: "stat" }, h("div", { class: "stat-label" }, "Goal"), h("div", { class: "stat-value mono", title: loop.goal.workflowDefinitionHash }, short(loop.goal.workflowDefinitionHash, 19)))),
      h("table", { class: "table" },
        h("thead", null, h("tr", null, h("th", { class: "num" }, "#"), h("th", null, "Run"), h("th", null, "Status"),
          h("th", null, "Summary"), h("th", null, "Output"))),
        h("tbody", null, rows)),
      loop.result ? [h("div", { class: "label" }, "Final output"), jsonBlock(loop.result.finalOutput)] : null,
    ];
  }

  function artifactsView(artifacts, runId) {
    if (artifacts.error) return h("div", { class: "callout error" }, artifacts.error);
    if (!artifacts.items.length) return message("This run has not written any artifact.");
    return h("table", { class: "table" },
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th", null, "Type"), h("th", { class: "num" }, "Size"),
        h("th", null, "Step"), h("th", null, "SHA-256"), h("th", null, "Created"))),
      h("tbody", null, artifacts.items.map((a) => h("tr", null,
        h("td", null, h("a", { href: `/api/runs/${encodeURIComponent(runId)}/artifacts/${encodeURIComponent(a.artifactId)}`, download: a.name }, a.name)),
        h("td", { class: "mono small" }, a.mediaType),
        h("td", { class: "num" }, bytes(a.size)),
        h("td", { class: "mono small" }, a.stepPath || "-"),
        h("td", { class: "mono small", title: a.sha256 }, short(a.sha256, 12)),
        h("td", { class: "nowrap" }, when(a.createdAt))))));
  }

  function loopPage(loopId) {
    document.title = `${loopId} · little-workflow`;
    const body = h("div");
    main.replaceChildren(
      h("nav", { class: "crumbs" }, h("a", { href: "/" }, "Runs"), h("span", { class: "sep" }, "/"), "Outer loops",
        h("span", { class: "sep" }, "/"), h("span", { class: "mono" }, loopId)),
      h("div", { class: "title-row" }, h("h1", { class: "mono" }, loopId)),
      body);
    async function refresh() {
      try {
        const loop = await api(`/api/loops/${encodeURIComponent(loopId)}`);
        body.replaceChildren(section("Cycles", cyclesView(loop, null)));
      } catch (error) {
        body.replaceChildren(h("div", { class: "callout error" }, String(error.message)));
      }
    }
    refresh();
    setInterval(() => { if (!document.hidden) refresh(); }, 2000);
  }

  // --- routing -----------------------------------------------------------------------

  const path = location.pathname;
  const runMatch = path.match(/^\/runs\/([^/]+)$/);
  const loopMatch = path.match(/^\/loops\/([^/]+)$/);
  if (runMatch) runPage(decodeURIComponent(runMatch[1]));
  else if (loopMatch) loopPage(decodeURIComponent(loopMatch[1]));
  else runsPage();
})();
