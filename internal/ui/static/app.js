// jetfleet dashboard: live updates (server-sent events), confirmations and
// replay progress. Every page works without it; it only keeps pages fresh.
// Values from the fleet go into the page with textContent and
// setAttribute, never as HTML.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";

  function fmt(n) {
    return Number(n).toLocaleString("en-US").replace(/,/g, "\u202f");
  }
  function rate(r) {
    return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
  }
  function setText(root, field, text) {
    root.querySelectorAll('[data-field="' + field + '"]').forEach(function (el) {
      if (el.textContent !== text) el.textContent = text;
    });
  }
  const stateClass = { succeeded: "ok", failed: "fail", rejected: "fail", stopped: "warn", cancelled: "warn", running: "run" };
  const terminal = { succeeded: 1, failed: 1, stopped: 1, cancelled: 1, rejected: 1 };

  // drawBar redraws a job's stacked progress bar.
  function drawBar(el, j) {
    const parts = [
      [j.succeeded, "ok", "succeeded"], [j.dead_lettered, "dlq", "dead-lettered"], [j.failed, "fail", "failed"],
      [j.skipped, "skip", "skipped"], [j.not_run, "notrun", "not run"], [Math.max(j.published - j.done, 0), "flight", "in flight"],
    ];
    const svg = el.querySelector("svg.bar");
    if (!svg) return;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const total = Math.max(j.items, 1);
    let x = 0;
    parts.forEach(function (p) {
      if (!(p[0] > 0)) return;
      const w = (100 * p[0]) / total;
      const r = document.createElementNS(SVG, "rect");
      r.setAttribute("class", p[1]);
      r.setAttribute("x", x.toFixed(2));
      r.setAttribute("y", "0");
      r.setAttribute("width", w.toFixed(2));
      r.setAttribute("height", "10");
      const t = document.createElementNS(SVG, "title");
      t.textContent = p[0] + " " + p[2];
      r.appendChild(t);
      svg.appendChild(r);
      x += w;
    });
  }

  let reloadTimer = null;
  function updateJob(j) {
    document.querySelectorAll('[data-job="' + CSS.escape(j.id) + '"]').forEach(function (root) {
      root.querySelectorAll('[data-field="state"]').forEach(function (el) {
        if (el.textContent !== j.state) {
          el.textContent = j.state;
          el.className = el.className.replace(/\b(ok|fail|warn|run|idle)\b/g, "").trim() + " " + (stateClass[j.state] || "idle");
        }
      });
      setText(root, "progress", fmt(j.done) + " / " + fmt(j.items));
      setText(root, "rate", j.rate > 0 || !terminal[j.state] ? rate(j.rate || 0) : "—");
      setText(root, "retries", fmt(j.retries) + " / " + (j.budget.total || 0));
      setText(root, "succeeded", fmt(j.succeeded));
      setText(root, "failed", fmt(j.failed));
      setText(root, "skipped", fmt(j.skipped));
      setText(root, "not_run", fmt(j.not_run));
      setText(root, "in_flight", fmt(Math.max(j.published - j.done, 0)));
      setText(root, "budget", j.budget.consumed + " of " + j.budget.total);
      if (j.completion_reason) setText(root, "reason", j.completion_reason);
      root.querySelectorAll('[data-field="dead_lettered"], [data-field="dlq"]').forEach(function (el) {
        const a = el.querySelector("a");
        const target = a || el;
        const text = fmt(j.dead_lettered);
        if (target.textContent !== text) target.textContent = text;
      });
      root.querySelectorAll('[data-field="bar"]').forEach(function (el) { drawBar(el, j); });
    });
    // On a job's own page, a change of state brings new sections
    // (completion, histograms): load the page again. The page drew the
    // live status, and the stored record it is fed from may still be a
    // step behind: reload only if the new state holds for a moment.
    const page = document.getElementById("job");
    if (page && page.dataset.job === j.id && page.dataset.state) {
      if (page.dataset.state !== j.state) {
        if (!reloadTimer) reloadTimer = setTimeout(function () { location.reload(); }, 1200);
      } else if (reloadTimer) {
        clearTimeout(reloadTimer);
        reloadTimer = null;
      }
    }
  }

  function addEvents(list, skipped) {
    const ul = document.getElementById("activity");
    const banner = document.getElementById("newjobs");
    list.forEach(function (ev) {
      if (banner && ev.type === "JobSubmitted" && !new URLSearchParams(location.search).get("cursor")) banner.hidden = false;
      if (!ul) return;
      if (ul.firstElementChild && ul.firstElementChild.classList.contains("muted")) ul.removeChild(ul.firstElementChild);
      const li = document.createElement("li");
      const t = ev.time ? new Date(ev.time).toLocaleTimeString() : "";
      const a = document.createElement("a");
      a.href = "/jobs/" + encodeURIComponent(ev.job_id || "");
      a.textContent = ev.job_id || "";
      li.append(t + " · ", a, " · " + (ev.type || "event"));
      ul.insertBefore(li, ul.firstChild);
      while (ul.children.length > 40) ul.removeChild(ul.lastChild);
    });
    if (ul && skipped > 0) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = "… and " + skipped + " more events";
      ul.insertBefore(li, ul.firstChild);
    }
  }

  // drawSeries redraws the fleet chart's two lines (geometry as the server draws it).
  function drawSeries(s) {
    const box = document.getElementById("fleet-chart");
    if (!box) return;
    const svg = box.querySelector("svg.chart");
    if (!svg) {
      if (s.done.some(function (v) { return v > 0; })) location.reload();
      return;
    }
    let top = 1;
    s.done.concat(s.retries).forEach(function (v) { top = Math.max(top, v); });
    const left = +svg.dataset.left, right = +svg.dataset.right, ytop = +svg.dataset.top, base = +svg.dataset.base;
    function pts(vals) {
      return vals.map(function (v, i) {
        const x = left + ((right - left) * i) / Math.max(vals.length - 1, 1);
        return x.toFixed(1) + "," + (base - ((base - ytop) * v) / top).toFixed(1);
      }).join(" ");
    }
    const done = svg.querySelector("polyline.done");
    const retries = svg.querySelector("polyline.retries");
    if (done) done.setAttribute("points", pts(s.done));
    if (retries) retries.setAttribute("points", pts(s.retries));
    const y = svg.querySelector("text.ylabel");
    if (y) y.textContent = rate(top) + "/s";
  }

  // refreshRegion replaces the element with id by the same element of a
  // fresh copy of the page (our own HTML, escaped by the server).
  let refreshing = false;
  function refreshRegion(id) {
    if (refreshing) return;
    refreshing = true;
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      const doc = new DOMParser().parseFromString(html, "text/html");
      const fresh = doc.getElementById(id);
      const old = document.getElementById(id);
      if (fresh && old) old.replaceWith(document.importNode(fresh, true));
    }).catch(function () {}).finally(function () {
      setTimeout(function () { refreshing = false; }, 2000);
    });
  }

  function connect() {
    const query = document.body.dataset.live;
    if (!query || !window.EventSource) return;
    const badge = document.getElementById("live");
    const es = new EventSource("/events?" + query);
    es.addEventListener("hello", function (e) {
      const st = JSON.parse(e.data).status;
      if (badge) {
        badge.textContent = st === "live" ? "live" : "partly live";
        badge.title = st;
        badge.classList.add("on");
      }
    });
    es.addEventListener("jobs", function (e) { JSON.parse(e.data).forEach(updateJob); });
    es.addEventListener("events", function (e) {
      const d = JSON.parse(e.data);
      addEvents(d.events || [], d.skipped || 0);
    });
    es.addEventListener("series", function (e) { drawSeries(JSON.parse(e.data)); });
    es.addEventListener("agents", function () { refreshRegion("agents"); });
    es.onerror = function () {
      if (badge) {
        badge.textContent = "reconnecting…";
        badge.classList.remove("on");
      }
    };
  }

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.dataset.confirm)) e.preventDefault();
      });
    });
  }

  // followReplay polls a running replay's status.
  function followReplay() {
    const page = document.getElementById("replay");
    if (!page || page.dataset.state !== "running") return;
    const bar = document.getElementById("replay-progress");
    const tick = function () {
      fetch("/api/replays/" + encodeURIComponent(page.dataset.replay), { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (s) {
          if (s.error) return;
          ["matched", "replayed", "failed", "skipped"].forEach(function (k) { setText(page.parentNode, k, fmt(s[k] || 0)); });
          if (bar) {
            bar.max = Math.max(s.matched, 1);
            bar.value = (s.replayed || 0) + (s.failed || 0) + (s.skipped || 0);
          }
          if (s.last_error) {
            page.parentNode.querySelectorAll('[data-field="last_error"]').forEach(function (el) {
              el.textContent = s.last_error;
              el.hidden = false;
            });
          }
          if (s.state !== "running") {
            location.reload();
            return;
          }
          setTimeout(tick, 1000);
        })
        .catch(function () { setTimeout(tick, 3000); });
    };
    setTimeout(tick, 500);
  }

  document.addEventListener("DOMContentLoaded", function () {
    const job = document.getElementById("job");
    if (job) {
      const st = job.querySelector('[data-field="state"]');
      if (st) job.dataset.state = st.textContent;
    }
    confirmations();
    followReplay();
    connect();
  });
})();
