// servesim lab: the page's glue. Every figure is built on the server (plotly JSON);
// this script only turns controls into scenario values, asks for runs and draws.
"use strict";

const lab = { values: {}, controls: [], lessons: [], lastId: 0, drawnRun: 0, drawnKnee: 0,
              summary: null, kneeRate: null, error: null, lesson: null };
window.lab = lab;  // read by tests/test_lab_browser.py
let inFlight = null;  // the AbortController of the newest request

const NAMES = { median_ttft_ms: "p50 TTFT (ms)", p99_ttft_ms: "p99 TTFT (ms)",
  median_tpot_ms: "p50 TPOT (ms)", p99_tpot_ms: "p99 TPOT (ms)", p99_itl_ms: "p99 ITL (ms)",
  request_throughput: "throughput (req/s)", request_goodput: "goodput (req/s)",
  num_preemptions: "preemptions", prefix_cache_hit_rate: "prefix-cache hit rate",
  num_kv_blocks: "KV blocks", completed: "completed", num_rejected: "rejected",
  cost_model: "cost model" };

function $(id) { return document.getElementById(id); }

function fromSlider(c, pos) {
  if (!c.log) return Number(pos);
  const v = c.low * Math.pow(c.high / c.low, pos / 1000);
  const step = c.step || 1;
  const digits = Math.pow(10, Math.floor(Math.log10(v)) - 2);  // 3 significant digits
  return Math.max(c.low, Math.round(v / Math.max(step, digits)) * Math.max(step, digits));
}
function toSlider(c, v) {
  if (!c.log) return v;
  return Math.round(1000 * Math.log(v / c.low) / Math.log(c.high / c.low));
}

function buildForm() {
  const form = $("form");
  const groups = {};
  for (const c of lab.controls) {
    if (!groups[c.group]) {
      const fs = document.createElement("fieldset");
      fs.innerHTML = `<legend>${c.group}</legend>`;
      form.appendChild(fs);
      groups[c.group] = fs;
    }
    const label = document.createElement("label");
    const id = "c-" + c.key.replaceAll(".", "-");
    label.htmlFor = id;
    label.textContent = c.label;
    let input;
    if (c.kind === "select") {
      input = document.createElement("select");
      for (const choice of c.choices) {
        const o = document.createElement("option");
        o.value = String(choice); o.textContent = String(choice);
        input.appendChild(o);
      }
    } else {
      input = document.createElement("input");
      input.type = { slider: "range", number: "number", checkbox: "checkbox" }[c.kind];
      if (c.kind === "slider") {
        input.min = c.log ? 0 : c.low; input.max = c.log ? 1000 : c.high;
        input.step = c.log ? 1 : c.step;
      } else if (c.kind === "number") {
        input.min = c.low; input.max = c.high; input.step = c.step;
      }
    }
    input.id = id;
    input.dataset.key = c.key;
    if (c.note) input.title = c.note;
    const out = document.createElement("output");
    if (c.fixed) { input.disabled = true; input.title = c.fixed; }
    label.appendChild(out);
    groups[c.group].appendChild(label);
    groups[c.group].appendChild(input);
    const event = c.kind === "slider" ? "input" : "change";
    input.addEventListener(event, () => { lab.values[c.key] = readInput(c, input); showValue(c); run(); });
  }
}

function readInput(c, input) {
  if (c.kind === "checkbox") return input.checked;
  if (c.kind === "slider") return fromSlider(c, Number(input.value));
  if (c.kind === "number") return input.value === "" ? null : Number(input.value);
  const numeric = c.choices.length && typeof c.choices[0] === "number";
  return numeric ? Number(input.value) : input.value;
}

function showValue(c) {
  const input = $("c-" + c.key.replaceAll(".", "-"));
  const v = lab.values[c.key];
  const out = input.previousSibling.querySelector("output");
  // A value the scenario has no key for shows as nothing, not "null" (a fixed control says why).
  let text = c.kind === "slider" && v !== null && v !== undefined ? String(v) : "";
  if (c.key === "workload.arrival.burstiness") text = `${v} (CV ${(1 / Math.sqrt(v)).toFixed(2)})`;
  out.textContent = c.fixed ? `${text} (${c.fixed})` : text;
}

function setInputs(values) {
  lab.values = { ...values };
  for (const c of lab.controls) {
    const input = $("c-" + c.key.replaceAll(".", "-"));
    const v = lab.values[c.key];
    if (c.kind === "checkbox") input.checked = Boolean(v);
    else if (c.kind === "slider") input.value = toSlider(c, v);
    else input.value = v === null || v === undefined ? "" : String(v);
    showValue(c);
  }
}

async function post(path, body, signal) {
  const response = await fetch(path, { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json" }, signal });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

function draw(id, figure) {
  Plotly.react(id, figure.data, figure.layout, { responsive: true, displaylogo: false });
}

function showSummary(summary) {
  const rows = [];
  for (const [key, name] of Object.entries(NAMES)) {
    const v = summary[key];
    const text = v === null || v === undefined ? "–" : typeof v === "number" ? Number(v.toPrecision(4)).toString() : v;
    rows.push(`<tr><td>${name}</td><td id="s-${key}" data-value="${v ?? ""}">${text}</td></tr>`);
  }
  $("summary").innerHTML = rows.join("");
}

function showError(message) {
  lab.error = message;
  $("error").hidden = message === null;
  $("error").textContent = message || "";
  document.querySelector("main").classList.toggle("stale", message !== null);
}

async function run(lessonName) {
  const id = ++lab.lastId;
  if (inFlight) inFlight.abort();  // the server supersedes it too
  const controller = new AbortController();
  inFlight = controller;
  $("status").textContent = "running…";
  try {
    const answer = await post("/api/run", { id, values: lab.values }, controller.signal);
    if (answer.superseded || id !== lab.lastId) return;
    if (answer.error) { showError(answer.error); $("status").textContent = ""; return; }
    showError(null);
    for (const name of ["ttft_cdf", "tpot_cdf", "timeseries", "waterfall"]) draw(name, answer.figures[name]);
    showSummary(answer.summary);
    lab.summary = answer.summary;
    $("yaml").value = answer.yaml;
    $("figure-caption").textContent = answer.figure_caption;
    lab.drawnRun = id;
    $("status").textContent = "computing the knee…";
    const knee = await post("/api/knee", { id, values: lab.values }, controller.signal);
    if (knee.superseded || id !== lab.lastId) return;
    if (knee.error) { showError(knee.error); return; }
    draw("knee", knee.knee);
    $("caption").textContent = knee.caption;
    lab.kneeRate = lab.values["workload.arrival.rate_per_s"];
    lab.drawnKnee = id;
    $("status").textContent = "";
    if (lessonName) {
      $("status").textContent = "checking the lesson's claim…";
      const verdict = await post("/api/lesson", { id, name: lessonName, values: lab.values }, controller.signal);
      if (verdict.superseded || id !== lab.lastId) return;
      showLesson(lessonName, verdict);
      $("status").textContent = "";
    }
  } catch (error) {
    if (error.name !== "AbortError") { showError(String(error)); }
  }
}

function showLesson(name, verdict) {
  const lesson = lab.lessons.find((l) => l.name === name);
  const box = $("lesson-result");
  box.hidden = false;
  if (verdict.error) { box.textContent = verdict.error; return; }
  box.className = verdict.holds ? "holds" : "fails";
  box.innerHTML = `<b>${lesson.title}</b><br>Claim: ${verdict.claim}<br>` +
    `<b>${verdict.holds ? "holds" : "does not hold"}</b> here: ${verdict.detail}<br>` +
    `<a href="/${lesson.notebook}">${lesson.notebook}</a>`;
  lab.lesson = { name, holds: verdict.holds, detail: verdict.detail };
}

function buildLessons() {
  for (const lesson of lab.lessons) {
    const button = document.createElement("button");
    button.type = "button";
    button.id = "lesson-" + lesson.name;
    button.textContent = lesson.title;
    button.title = lesson.claim;
    // The starting scenario cannot take this lesson's values: the run would be refused.
    if (lesson.refused) { button.disabled = true; button.title = `not for this scenario: ${lesson.refused}`; }
    button.addEventListener("click", () => { setInputs(lesson.values); run(lesson.name); });
    $("lessons").appendChild(button);
  }
}

$("copy").addEventListener("click", async () => {
  $("yaml").hidden = false;
  $("yaml").select();
  try { await navigator.clipboard.writeText($("yaml").value); $("status").textContent = "copied: save as lab.yaml, run servesim run lab.yaml"; }
  catch (error) { $("status").textContent = "select the text and copy it (the clipboard is not available here)"; }
});

(async () => {
  const setup = await (await fetch("/api/setup")).json();
  lab.controls = setup.controls;
  lab.lessons = setup.lessons;
  buildLessons();
  buildForm();
  setInputs(setup.values);
  run();
})();
