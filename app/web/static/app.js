/* TierOps dashboard behaviour: live transcript and events (SSE), partial-message toggle,
 * confirmations (delete, Stop), the navigation menu, times in the viewer's zone and keyboard
 * access to boxes that scroll. No inline handlers anywhere: everything is wired from here (CSP).
 * Every page works without this file: forms submit, the menu is a <details>, and
 * times read as absolute UTC. */
(function () {
  "use strict";

  var PARTIAL_KEY = "tierops.showPartial";

  function parse(data) {
    try { return JSON.parse(data); } catch (e) { return null; }
  }

  /* --- show / hide stream_event ("partial") lines ----------------------------------- */
  function setupPartialToggle() {
    var buttons = document.querySelectorAll(".toggle-partial");
    if (!buttons.length) return;
    var show = false;
    try { show = window.localStorage.getItem(PARTIAL_KEY) === "1"; } catch (e) { /* storage off */ }
    function apply() {
      document.body.classList.toggle("show-partial", show);
      buttons.forEach(function (b) {
        b.textContent = show ? "Hide partial messages" : "Show partial messages";
        b.setAttribute("aria-pressed", show ? "true" : "false");
      });
    }
    buttons.forEach(function (b) {
      b.addEventListener("click", function () {
        show = !show;
        try { window.localStorage.setItem(PARTIAL_KEY, show ? "1" : "0"); } catch (e) { /* ignore */ }
        apply();
      });
    });
    apply();
  }

  /* --- live session transcript -------------------------------------------------------- */
  function nearBottom() {
    var doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - 150;
  }

  function setupTranscript() {
    var box = document.getElementById("transcript");
    if (!box || box.getAttribute("data-live") !== "1" || !window.EventSource) return;
    var id = box.getAttribute("data-session");
    if (!/^[0-9]+$/.test(id || "")) return;
    var lastSeq = parseInt(box.getAttribute("data-last-seq") || "0", 10) || 0;
    var source = new EventSource("/sessions/" + id + "/stream?after=" + lastSeq);
    var empty = document.querySelector(".empty-transcript");

    source.addEventListener("activity", function (ev) {
      var msg = parse(ev.data);
      if (!msg || typeof msg.seq !== "number" || typeof msg.html !== "string") return;
      if (document.getElementById("act-" + msg.seq)) return; /* already shown: no duplicates */
      var follow = nearBottom();
      box.insertAdjacentHTML("beforeend", msg.html); /* server-rendered, fully escaped fragment */
      if (msg.seq > lastSeq) {
        lastSeq = msg.seq;
        box.setAttribute("data-last-seq", String(lastSeq));
      }
      if (empty) { empty.remove(); empty = null; }
      if (follow) window.scrollTo(0, document.documentElement.scrollHeight);
    });

    source.addEventListener("resync", function () {
      /* the server replays what this page missed; nothing to do here */
    });

    source.addEventListener("end", function () {
      source.close();
      /* Reload once so the outcome panel shows; a counter stops a reload loop if the page
         still says "running" right after the end (at most 3 reloads per minute). */
      var key = "tierops.reload." + id;
      var now = Date.now();
      var info = null;
      try { info = parse(window.sessionStorage.getItem(key) || "null"); } catch (e) { info = null; }
      if (!info || now - info.t > 60000) info = { n: 0, t: now };
      if (info.n >= 3) return;
      info.n += 1;
      try { window.sessionStorage.setItem(key, JSON.stringify(info)); } catch (e) { /* ignore */ }
      window.setTimeout(function () { window.location.reload(); }, info.n > 1 ? 2000 : 300);
    });
    /* On network errors EventSource reconnects by itself and sends Last-Event-ID. */
  }

  /* --- live events table ---------------------------------------------------------------- */
  function setupEvents() {
    var body = document.getElementById("events");
    if (!body || body.getAttribute("data-live") !== "1" || !window.EventSource) return;
    var after = parseInt(body.getAttribute("data-after") || "", 10);
    /* after= the newest row shown, so nothing created between render and connect is missed */
    var source = new EventSource("/events/stream" + (after >= 0 ? "?after=" + after : ""));
    source.addEventListener("event", function (ev) {
      var msg = parse(ev.data);
      if (!msg || typeof msg.html !== "string") return;
      if (msg.id !== undefined && document.getElementById("event-" + msg.id)) return;
      var emptyRow = body.querySelector("tr.empty");
      if (emptyRow) emptyRow.remove();
      body.insertAdjacentHTML("afterbegin", msg.html); /* server-rendered, fully escaped row */
    });
  }

  /* --- confirmations (delete, Stop) ---------------------------------------------------------
   * Delegated and in the capture phase, so forms added later are covered too. A form asks when
   * it (or the button that submits it) carries data-confirm="…", or its action ends with /stop
   * (Stop kills a process group; no template needs to opt in). */
  function confirmText(form, submitter) {
    var own = (submitter && submitter.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
    if (own) return own;
    var action = (submitter && submitter.getAttribute("formaction")) || form.getAttribute("action") || "";
    var session = /\/sessions\/([0-9]+)\/stop\/?$/.exec(action);
    if (session) return "Stop session #" + session[1] + "? Its process group is killed.";
    if (/\/stop\/?$/.test(action)) return "Stop it? Its process group is killed.";
    if (form.classList.contains("confirm")) return "Are you sure?";
    return null;
  }

  function setupConfirm() {
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!form || form.tagName !== "FORM") return;
      var text = confirmText(form, ev.submitter || null);
      if (text && !window.confirm(text)) {
        ev.preventDefault();
        ev.stopImmediatePropagation();
      }
    }, true);
  }

  /* --- navigation menu ------------------------------------------------------------------------
   * A <details> in base.html: on wide screens it is kept open (its summary hidden by app.css),
   * on small screens it starts closed and closes again on Escape or a click outside it. */
  function setupNav() {
    var menu = document.getElementById("nav-menu");
    if (!menu || !window.matchMedia) return;
    var wide = window.matchMedia("(min-width: 761px)");
    function apply() {
      menu.classList.toggle("wide", wide.matches);
      menu.open = wide.matches;
    }
    apply();
    if (wide.addEventListener) wide.addEventListener("change", apply);
    else if (wide.addListener) wide.addListener(apply);
    document.addEventListener("keydown", function (ev) {
      if (ev.key !== "Escape" || !menu.open || wide.matches) return;
      menu.open = false;
      var summary = menu.querySelector("summary");
      if (summary) summary.focus();
    });
    document.addEventListener("click", function (ev) {
      if (menu.open && !wide.matches && !menu.contains(ev.target)) menu.open = false;
    });
  }

  /* --- times ------------------------------------------------------------------------------------
   * The server writes absolute UTC (`<time datetime="…Z">2026-11-25 03:14:45</time>`). Here a
   * time from the `when` filter (class "when") becomes relative ("3 min ago"), refreshed every
   * minute; other times (the transcript's HH:MM:SS) keep their shape in the viewer's zone. The
   * title always holds the absolute time in the viewer's zone, for hover and long-press. */
  var absolute = null;
  var dateOnly = null;
  try {
    absolute = new Intl.DateTimeFormat(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false, timeZoneName: "short" });
    dateOnly = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric" });
  } catch (e) { absolute = null; }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function relative(then, now) {
    var s = Math.round((then - now) / 1000);
    var a = Math.abs(s);
    if (a < 45) return s <= 0 ? "just now" : "in a few seconds";
    var text;
    if (a < 90 * 60) text = Math.max(1, Math.round(a / 60)) + " min";
    else if (a < 36 * 3600) text = Math.round(a / 3600) + " h";
    else if (a < 30 * 86400) { var d = Math.round(a / 86400); text = d + (d === 1 ? " day" : " days"); }
    else return dateOnly ? dateOnly.format(then) : then.toDateString();
    return s <= 0 ? text + " ago" : "in " + text;
  }

  function localise(el, now) {
    var iso = el.getAttribute("datetime");
    if (!iso) return;
    var then = new Date(iso);
    if (isNaN(then.getTime())) return;
    el.title = absolute ? absolute.format(then) : then.toString();
    if (el.classList.contains("when")) {
      el.textContent = relative(then, now);
    } else if (/^\d\d:\d\d:\d\d$/.test(el.textContent.trim())) {
      el.textContent = pad(then.getHours()) + ":" + pad(then.getMinutes()) + ":" + pad(then.getSeconds());
    } else if (/^\d{4}-\d\d-\d\d[ T]\d\d:\d\d/.test(el.textContent.trim())) {
      el.textContent = then.getFullYear() + "-" + pad(then.getMonth() + 1) + "-" + pad(then.getDate()) + " " +
        pad(then.getHours()) + ":" + pad(then.getMinutes()) + ":" + pad(then.getSeconds());
    }
  }

  function localiseAll(root) {
    var now = new Date();
    if (root.tagName === "TIME") localise(root, now);
    if (root.querySelectorAll) root.querySelectorAll("time[datetime]").forEach(function (el) { localise(el, now); });
  }

  /* --- boxes that scroll ------------------------------------------------------------------------
   * A table, code block or .table-scroll box that overflows gets tabindex=0 (unless it holds a
   * link or control already), so keyboard users can scroll it; removed again when it fits. */
  var SCROLLERS = "table, pre, .table-scroll, .table-wrap";

  function markScrollers(root) {
    var boxes = [];
    if (root.matches && root.matches(SCROLLERS)) boxes.push(root);
    if (root.querySelectorAll) root.querySelectorAll(SCROLLERS).forEach(function (b) { boxes.push(b); });
    boxes.forEach(function (box) {
      var style = window.getComputedStyle(box);
      var scrolls = (/(auto|scroll)/.test(style.overflowX) && box.scrollWidth > box.clientWidth + 1) ||
        (/(auto|scroll)/.test(style.overflowY) && box.scrollHeight > box.clientHeight + 1);
      var added = box.getAttribute("data-scroll-focus") === "1";
      if (scrolls && !added && !box.hasAttribute("tabindex") &&
          !box.querySelector("a[href], button, input, select, textarea, summary, [tabindex]")) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("data-scroll-focus", "1");
      } else if (!scrolls && added) {
        box.removeAttribute("tabindex");
        box.removeAttribute("data-scroll-focus");
      }
    });
  }

  function setupLayoutHelpers() {
    localiseAll(document);
    markScrollers(document);
    window.setInterval(function () {
      var now = new Date();
      document.querySelectorAll("time.when[datetime]").forEach(function (el) { localise(el, now); });
    }, 60000);
    var pending = null;
    window.addEventListener("resize", function () {
      if (pending) window.clearTimeout(pending);
      pending = window.setTimeout(function () { pending = null; markScrollers(document); }, 200);
    });
    if (!window.MutationObserver) return;
    /* rows inserted by the live streams get the same treatment */
    new MutationObserver(function (records) {
      records.forEach(function (r) {
        r.addedNodes.forEach(function (n) {
          if (n.nodeType !== 1) return;
          localiseAll(n);
          markScrollers(n);
        });
      });
    }).observe(document.body, { childList: true, subtree: true });
  }

  function init() {
    setupNav();
    setupLayoutHelpers();
    setupPartialToggle();
    setupTranscript();
    setupEvents();
    setupConfirm();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
