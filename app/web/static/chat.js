// Ask TierOps (/chat): send the question as JSON to /chat/ask and render the event stream it
// answers with: text as it is written, each tool call folded (<details>) with its result. Without
// this script the form posts and the page shows the conversation once answered.
"use strict";
(function () {
  const form = document.getElementById("chat-form");
  if (!form || !window.fetch || !window.TextDecoder) return;
  const list = document.getElementById("chat-turns");
  const status = document.getElementById("chat-status");
  const question = document.getElementById("chat-question");
  const send = document.getElementById("chat-send");

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  question.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); form.requestSubmit(); }
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = question.value.trim();
    if (!text) { question.focus(); return; }
    const fields = Object.fromEntries(new FormData(form).entries());
    const turn = el("li", "chat-turn");
    const asked = el("div", "chat-question", text);
    const answer = el("div", "chat-answer");
    const meta = el("p", "muted small", "asking…");
    turn.append(asked, answer, meta);
    list.append(turn);
    send.disabled = true;
    status.textContent = "Asking…";
    const tools = new Map();
    let written = "";
    function say(piece) { written += piece; answer.textContent = written; }
    function fail(message) {
      answer.classList.add("chat-failed");
      answer.textContent = (written ? written + "\n\n" : "") + "Error: " + message;
      meta.textContent = "failed";
      status.textContent = "The question could not be answered: " + message;
    }
    try {
      const resp = await fetch("/chat/ask", {
        method: "POST", headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
        body: JSON.stringify(fields), credentials: "same-origin",
      });
      if (!resp.ok || !resp.body) {
        let detail = resp.statusText;
        try { detail = (await resp.json()).detail || detail; } catch (e) { /* not JSON */ }
        fail(detail + (resp.headers.get("Retry-After") ? " (retry in " + resp.headers.get("Retry-After") + " s)" : ""));
        return;
      }
      question.value = "";
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let name = "message", data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue;
          const msg = JSON.parse(data);
          if (name === "start") {
            form.elements.conversation.value = msg.conversation;
            form.elements.incident.value = "";
            if (location.pathname !== "/chat/" + msg.conversation) history.replaceState(null, "", "/chat/" + msg.conversation);
            meta.textContent = "answering · ";
            if (msg.session) {
              const link = el("a", "", "session " + msg.session);
              link.href = "/sessions/" + msg.session;
              meta.append(link);
            }
          } else if (name === "text") {
            say(msg.text);
          } else if (name === "tool_call") {
            const box = el("details", "chat-tool");
            let shown = msg.arguments;
            try { const args = JSON.parse(msg.arguments); shown = args.command || msg.arguments; } catch (e) { /* as sent */ }
            box.append(el("summary", "", msg.name + ": " + shown.slice(0, 200)));
            box.append(el("pre", "", msg.arguments));
            turn.insertBefore(box, answer);
            tools.set(msg.id, box);
          } else if (name === "tool_result") {
            const box = tools.get(msg.id);
            if (box) {
              box.append(el("pre", msg.is_error ? "chat-failed" : "", (msg.is_error ? "error: " : "") + msg.text));
            }
          } else if (name === "done") {
            meta.textContent = "completed · ";
            const link = el("a", "", "session " + msg.session);
            link.href = "/sessions/" + msg.session;
            meta.append(link, document.createTextNode(
              (msg.cost_usd != null ? " · $" + Number(msg.cost_usd).toFixed(4) : "") +
              " · " + msg.prompt_tokens + " in / " + msg.completion_tokens + " out tokens"));
            status.textContent = "Answered.";
          } else if (name === "error") {
            fail(msg.message);
          }
        }
      }
    } catch (e) {
      fail(String(e));
    } finally {
      send.disabled = false;
      question.focus();
    }
  });
})();
