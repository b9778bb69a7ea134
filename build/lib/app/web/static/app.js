/* TierOps dashboard behaviour: live transcript and events (SSE), partial-message toggle,
 * delete confirmation. No inline handlers anywhere: everything is wired from here (CSP). */
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

  /* --- confirmations (delete) ------------------------------------------------------------ */
  function setupConfirm() {
    document.querySelectorAll("form.confirm").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        var text = form.getAttribute("data-confirm") || "Are you sure?";
        if (!window.confirm(text)) ev.preventDefault();
      });
    });
  }

  function init() {
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
